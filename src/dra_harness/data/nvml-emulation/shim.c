// NVML's C entry points with their exact prototypes (nvml.h from the go-nvml module, found by the build),
// each passing on to the Go side (emulation.go). Everything else nvml.h declares answers
// NVML_ERROR_NOT_SUPPORTED from stubs the build generates (stubs.c), so no caller dies on a missing symbol.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "nvml.h"
#include "_cgo_export.h"

// go-nvml's nvml.h wraps each handle in a one-pointer struct (passed exactly as the pointer is); ours are
// small integers in disguise, never dereferenced by a caller.
#define H(d) ((uintptr_t)(d).handle)
#define D(h) ((nvmlDevice_t){(struct nvmlDevice_st *)(uintptr_t)(h)})

static nvmlReturn_t device_int(nvmlDevice_t d, int which, unsigned int *out) {
    int v = 0;
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = (nvmlReturn_t)emuDeviceInt(H(d), which, &v);
    if (r == NVML_SUCCESS) *out = (unsigned int)v;
    return r;
}

nvmlReturn_t nvmlInit_v2(void) { return (nvmlReturn_t)emuInit(); }
nvmlReturn_t nvmlInit(void) { return (nvmlReturn_t)emuInit(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return (nvmlReturn_t)emuInit(); }
nvmlReturn_t nvmlShutdown(void) { return (nvmlReturn_t)emuShutdown(); }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { return (nvmlReturn_t)emuSystemString(0, v, n); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) { return (nvmlReturn_t)emuSystemString(1, v, n); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return (nvmlReturn_t)emuCudaDriverVersion(v); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return (nvmlReturn_t)emuCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return (nvmlReturn_t)emuDeviceCount(n); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return (nvmlReturn_t)emuDeviceCount(n); }

static nvmlReturn_t by_index(unsigned int i, nvmlDevice_t *d) {
    uintptr_t h = 0;
    if (d == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = (nvmlReturn_t)emuHandleByIndex(i, &h);
    if (r == NVML_SUCCESS) *d = D(h);
    return r;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return by_index(i, d); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return by_index(i, d); }

static nvmlReturn_t by_key(int which, const char *key, nvmlDevice_t *d) {
    uintptr_t h = 0;
    if (d == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = (nvmlReturn_t)emuHandleBy(which, (char *)key, &h);
    if (r == NVML_SUCCESS) *d = D(h);
    return r;
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) { return by_key(0, uuid, d); }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d) { return by_key(1, bus, d); }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *d) { return by_key(1, bus, d); }

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *v, unsigned int n) { return (nvmlReturn_t)emuDeviceString(H(d), 0, v, n); }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *v, unsigned int n) { return (nvmlReturn_t)emuDeviceString(H(d), 1, v, n); }
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *v, unsigned int n) { return (nvmlReturn_t)emuDeviceString(H(d), 3, v, n); }

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *v) { return device_int(d, 0, v); }
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *v) { return device_int(d, 1, v); }
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    if (major == NULL || minor == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = (nvmlReturn_t)emuDeviceInt(H(d), 2, major);
    return r == NVML_SUCCESS ? (nvmlReturn_t)emuDeviceInt(H(d), 3, minor) : r;
}
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, nvmlDeviceArchitecture_t *v) { return device_int(d, 4, v); }
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, nvmlBrandType_t *v) {
    unsigned int b = 0;
    nvmlReturn_t r = device_int(d, 5, &b);
    if (r == NVML_SUCCESS) *v = (nvmlBrandType_t)b;
    return r;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t r = device_int(d, 6, current);
    if (r == NVML_SUCCESS && pending != NULL) *pending = *current;
    return r;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *v) { return device_int(d, 7, v); }
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t *v) {
    unsigned int m = 0;
    nvmlReturn_t r = device_int(d, 8, &m);
    if (r == NVML_SUCCESS) *v = (nvmlComputeMode_t)m;
    return r;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, nvmlEnableState_t *v) {
    unsigned int m = 0;
    nvmlReturn_t r = device_int(d, 9, &m);
    if (r == NVML_SUCCESS) *v = (nvmlEnableState_t)m;
    return r;
}
nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t d, unsigned int *v) { return device_int(d, 10, v); }
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *v) { return device_int(d, 11, v); }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return (nvmlReturn_t)emuMemory(H(d), &m->total, &m->free, &m->used);
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    if (m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    m->reserved = 0;
    return (nvmlReturn_t)emuMemory(H(d), &m->total, &m->free, &m->used);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return (nvmlReturn_t)emuPci(H(d), p); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return (nvmlReturn_t)emuPci(H(d), p); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return (nvmlReturn_t)emuPci(H(d), p); }

// Emulated GPUs run nothing: no process holds one.
static nvmlReturn_t no_processes(nvmlDevice_t d, unsigned int *count) {
    unsigned int minor = 0;
    nvmlReturn_t r = device_int(d, 0, &minor);
    if (r != NVML_SUCCESS) return r;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) { (void)i; return no_processes(d, c); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) { (void)i; return no_processes(d, c); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) { (void)i; return no_processes(d, c); }

// MIG: profiles are NVIDIA's; no GPU instance exists (none is created yet), so no MIG device either.
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile, nvmlGpuInstanceProfileInfo_t *i) {
    if (i == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return (nvmlReturn_t)emuGpuInstanceProfile(H(d), profile, i);
}
// NVIDIA's naming: slices, memory rounded up to whole GB, and the media-engine variant of the profile ID.
static void profile_name(unsigned int id, const nvmlGpuInstanceProfileInfo_t *p, char *out, size_t n) {
    const char *variant = "";
    switch (id) {
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: case NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: variant = "+me"; break;
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: case NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: variant = "-me"; break;
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: case NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: variant = "+me.all"; break;
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX:
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: case NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX: variant = "+gfx"; break;
    }
    snprintf(out, n, "MIG %ug.%llugb%s", p->sliceCount, (p->memorySizeMB + 1023) / 1024, variant);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info) {
    nvmlGpuInstanceProfileInfo_t p;
    if (info == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = (nvmlReturn_t)emuGpuInstanceProfile(H(d), profile, &p);
    if (r != NVML_SUCCESS) return r;
    if (info->version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        v3->id = p.id; v3->sliceCount = p.sliceCount; v3->instanceCount = p.instanceCount;
        v3->multiprocessorCount = p.multiprocessorCount; v3->copyEngineCount = p.copyEngineCount;
        v3->decoderCount = p.decoderCount; v3->encoderCount = p.encoderCount; v3->jpegCount = p.jpegCount;
        v3->ofaCount = p.ofaCount; v3->memorySizeMB = p.memorySizeMB;
        v3->capabilities = p.isP2pSupported ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0;
        profile_name(profile, &p, v3->name, sizeof v3->name);
        return NVML_SUCCESS;
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    info->id = p.id; info->isP2pSupported = p.isP2pSupported; info->sliceCount = p.sliceCount;
    info->instanceCount = p.instanceCount; info->multiprocessorCount = p.multiprocessorCount;
    info->copyEngineCount = p.copyEngineCount; info->decoderCount = p.decoderCount; info->encoderCount = p.encoderCount;
    info->jpegCount = p.jpegCount; info->ofaCount = p.ofaCount; info->memorySizeMB = p.memorySizeMB;
    profile_name(profile, &p, info->name, sizeof info->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int profile,
                                                           nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    return (nvmlReturn_t)emuPlacements(H(d), profile, placements, count);
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t d, unsigned int profile,
                                                        nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    return (nvmlReturn_t)emuPlacements(H(d), profile, placements, count);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    unsigned int minor = 0;
    (void)index; (void)mig;
    nvmlReturn_t r = device_int(d, 0, &minor);
    return r == NVML_SUCCESS ? NVML_ERROR_NOT_FOUND : r;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    unsigned int minor = 0;
    nvmlReturn_t r = device_int(d, 0, &minor);
    if (r == NVML_SUCCESS) *isMig = 0;
    return r;
}

// Events: the set exists and waits out its timeout; no emulated GPU ever reports an error (yet).
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *set = (nvmlEventSet_t){(struct nvmlEventSet_st *)(uintptr_t)0x65760001};
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { (void)set; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    unsigned int minor = 0;
    nvmlReturn_t r = device_int(d, 0, &minor);
    if (r == NVML_SUCCESS) *types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError;
    return r;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    unsigned int minor = 0;
    (void)types; (void)set;
    return device_int(d, 0, &minor);
}
static nvmlReturn_t wait_out(unsigned int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    return NVML_ERROR_TIMEOUT;
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) { (void)set; (void)data; return wait_out(ms); }
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) { (void)set; (void)data; return wait_out(ms); }
