"""Driver profiles: shipped ones load, detection picks the driver that publishes, bad choices are one line."""

from __future__ import annotations

import pytest

from dra_harness.providers.profiles import ProfileError, all_profiles, by_name, detect


class FakeKube:
    """Just enough of the REST core for detection (pure logic: no Kubernetes involved)."""

    def __init__(self, classes, slices):
        self.data = {"deviceclasses": classes, "resourceslices": slices}

    def list(self, res, *args, **kwargs):
        return self.data[res.plural]


def slice_of(driver, n):
    return {"spec": {"driver": driver, "devices": [{"name": f"d{i}"} for i in range(n)]}}


def test_the_shipped_profiles_load():
    assert {"example", "nvidia"} <= set(all_profiles())
    assert by_name("gpu.nvidia.com").name == "nvidia"


def test_detection_picks_the_profile_whose_class_exists_and_driver_publishes():
    kube = FakeKube([{"metadata": {"name": "gpu.nvidia.com"}}, {"metadata": {"name": "gpu.example.com"}}],
                    [slice_of("gpu.nvidia.com", 8), slice_of("gpu.example.com", 2)])
    assert detect(kube).name == "nvidia"


def test_detection_explains_what_it_saw_when_nothing_fits():
    kube = FakeKube([{"metadata": {"name": "fpga.acme.io"}}], [slice_of("fpga.acme.io", 4)])
    with pytest.raises(ProfileError, match=r"DeviceClasses: fpga.acme.io; drivers publishing: fpga.acme.io \(4 devices\)"):
        detect(kube)


def test_an_unknown_driver_name_is_one_line():
    with pytest.raises(ProfileError, match="no driver profile 'amd'; known: example, nvidia"):
        by_name("amd")


def test_cel_paths_follow_the_published_names():
    nvidia = by_name("nvidia")
    assert nvidia.cel_attribute("model") == "device.attributes['gpu.nvidia.com'].productName"
    assert nvidia.cel_attribute("pcieRoot") == "device.attributes['resource.kubernetes.io'].pcieRoot"
    assert nvidia.qualified("productName") == "gpu.nvidia.com/productName"
