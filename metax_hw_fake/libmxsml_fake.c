/*
 * A fake libmxsml: the subset of MetaX's System Management Library that metax_hw/mxsml.py binds, answering
 * from a state file the test controls, so the real ctypes binding is exercised against a real shared object.
 *
 * The state file is "<this library's path>.state" (found with dladdr), re-read on every call so a test can
 * change the GPUs between samplings. metax_hw_fake/mxsml.py writes it from the fake host (the same records
 * the fake mx-smi prints). Lines, fields separated by single spaces:
 *
 *   init <code>                      what mxSmlInit returns (0: success)
 *   maca <version>                   what mxSmlGetMacaVersion returns ("-": not supported)
 *   gpu <id> <code> <mode> <bdf> <uuid> <util> <temp_centi> <power_mw> <limit_mw> <vram_total_kib>
 *       <vram_used_kib> <xtt_total_kib> <xtt_used_kib> <state> <driver> <bios> <name ...>
 *
 * <code> non-zero: every per-device call but mxSmlGetDeviceInfo returns it (a device that stopped
 * answering). A numeric value of -1 or a version "-": that call returns MXSML_OperationNotSupport.
 * Ids below 100 are counted by mxSmlGetDeviceCount, from 100 by mxSmlGetPfDeviceCount.
 * Board power is reported as two inputs (half each) so the reader must sum them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SUCCESS = 0,
    FAILURE = 1,
    NOT_SUPPORTED = 3,
    INVALID_DEVICE_ID = 6,
    INVALID_INPUT = 9,
    INSUFFICIENT_SIZE = 10,
};

typedef struct {
    unsigned int deviceId;
    unsigned int type;
    char bdfId[32];
    unsigned int gpuId;
    unsigned int nodeId;
    char uuid[96];
    unsigned int brand;
    unsigned int mode;
    char deviceName[32];
} mxSmlDeviceInfo_t;

typedef struct {
    long visVramTotal, visVramUse, vramTotal, vramUse, xttTotal, xttUse;
} mxSmlMemoryInfo_t;

typedef struct {
    unsigned int voltage, current, power;
} mxSmlBoardWayElectricInfo_t;

#define MAX_DEVICES 256
#define TEXT 64

typedef struct {
    unsigned int id, code, mode;
    char bdf[32], uuid[96], driver[TEXT], bios[TEXT], name[32];
    long util, temp, power, limit, vram_total, vram_used, xtt_total, xtt_used, state;
} device_t;

static device_t devices[MAX_DEVICES];
static int device_count;
static unsigned int init_code;
static char maca[TEXT];
static int initialised;

static int load(void) {
    Dl_info self;
    char path[4096];
    char line[1024];
    if (!dladdr((void *)load, &self) || self.dli_fname == NULL) return -1;
    snprintf(path, sizeof path, "%s.state", self.dli_fname);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    device_count = 0;
    init_code = 0;
    strcpy(maca, "-");
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "init ", 5) == 0) {
            init_code = (unsigned int)strtoul(line + 5, NULL, 10);
        } else if (strncmp(line, "maca ", 5) == 0) {
            snprintf(maca, sizeof maca, "%.63s", line + 5);
        } else if (strncmp(line, "gpu ", 4) == 0 && device_count < MAX_DEVICES) {
            device_t *d = &devices[device_count];
            int name_at = 0;
            memset(d, 0, sizeof *d);
            if (sscanf(line + 4, "%u %u %u %31s %95s %ld %ld %ld %ld %ld %ld %ld %ld %ld %63s %63s %n", &d->id,
                       &d->code, &d->mode, d->bdf, d->uuid, &d->util, &d->temp, &d->power, &d->limit,
                       &d->vram_total, &d->vram_used, &d->xtt_total, &d->xtt_used, &d->state, d->driver, d->bios,
                       &name_at) >= 16 && name_at > 0) {
                snprintf(d->name, sizeof d->name, "%.31s", line + 4 + name_at);
                device_count++;
            }
        }
    }
    fclose(f);
    return 0;
}

/* The device to answer for: its id must exist, the library be initialised and the device be answering. */
static unsigned int find(unsigned int id, device_t **out, int need_answer) {
    if (!initialised || load() != 0) return FAILURE;
    for (int i = 0; i < device_count; i++) {
        if (devices[i].id == id) {
            if (need_answer && devices[i].code != 0) return devices[i].code;
            *out = &devices[i];
            return SUCCESS;
        }
    }
    return INVALID_DEVICE_ID;
}

static unsigned int copy_text(const char *value, char *out, unsigned int *size) {
    if (out == NULL || size == NULL) return INVALID_INPUT;
    if (strcmp(value, "-") == 0) return NOT_SUPPORTED;
    if (strlen(value) + 1 > *size) return INSUFFICIENT_SIZE;
    strcpy(out, value);
    *size = (unsigned int)strlen(value) + 1;
    return SUCCESS;
}

unsigned int mxSmlInit(void) {
    if (load() != 0) return FAILURE;
    if (init_code != 0) return init_code;
    initialised = 1;
    return SUCCESS;
}

const char *mxSmlGetErrorString(unsigned int code) {
    switch (code) {
    case SUCCESS: return "success";
    case FAILURE: return "failure (fake libmxsml)";
    case NOT_SUPPORTED: return "operation not supported (fake libmxsml)";
    case INVALID_DEVICE_ID: return "invalid device id (fake libmxsml)";
    default: return "error (fake libmxsml)";
    }
}

static unsigned int count(int pfs) {
    unsigned int n = 0;
    if (!initialised || load() != 0) return 0;
    for (int i = 0; i < device_count; i++)
        if ((devices[i].id >= 100) == pfs) n++;
    return n;
}

unsigned int mxSmlGetDeviceCount(void) { return count(0); }

unsigned int mxSmlGetPfDeviceCount(void) { return count(1); }

unsigned int mxSmlGetDeviceInfo(unsigned int id, mxSmlDeviceInfo_t *info) {
    device_t *d;
    unsigned int rc = find(id, &d, 0);
    if (rc != SUCCESS) return rc;
    if (info == NULL) return INVALID_INPUT;
    memset(info, 0, sizeof *info);
    info->deviceId = id;
    info->mode = d->mode;
    info->brand = 2; /* C-class */
    snprintf(info->bdfId, sizeof info->bdfId, "%s", d->bdf);
    snprintf(info->uuid, sizeof info->uuid, "%s", d->uuid);
    snprintf(info->deviceName, sizeof info->deviceName, "%s", d->name);
    return SUCCESS;
}

#define GET_NUMBER(field, type, out)                                                                           \
    device_t *d;                                                                                               \
    unsigned int rc = find(id, &d, 1);                                                                         \
    if (rc != SUCCESS) return rc;                                                                              \
    if ((out) == NULL) return INVALID_INPUT;                                                                   \
    if (d->field < 0) return NOT_SUPPORTED;                                                                    \
    *(out) = (type)d->field;                                                                                   \
    return SUCCESS

unsigned int mxSmlGetDeviceIpUsage(unsigned int id, unsigned int ip, int *usage) {
    if (ip != 4) return NOT_SUPPORTED; /* only MXSML_Usage_Xcore */
    GET_NUMBER(util, int, usage);
}

unsigned int mxSmlGetTemperatureInfo(unsigned int id, unsigned int sensor, int *temperature) {
    if (sensor != 0) return NOT_SUPPORTED; /* only MXSML_Temperature_Hotspot */
    GET_NUMBER(temp, int, temperature);
}

unsigned int mxSmlGetBoardPowerLimit(unsigned int id, unsigned int *limit) { GET_NUMBER(limit, unsigned int, limit); }

unsigned int mxSmlGetDeviceState(unsigned int id, int *state) { GET_NUMBER(state, int, state); }

unsigned int mxSmlGetMemoryInfo(unsigned int id, mxSmlMemoryInfo_t *memory) {
    device_t *d;
    unsigned int rc = find(id, &d, 1);
    if (rc != SUCCESS) return rc;
    if (memory == NULL) return INVALID_INPUT;
    if (d->vram_total < 0) return NOT_SUPPORTED;
    memory->visVramTotal = memory->vramTotal = d->vram_total;
    memory->visVramUse = memory->vramUse = d->vram_used;
    memory->xttTotal = d->xtt_total;
    memory->xttUse = d->xtt_used;
    return SUCCESS;
}

unsigned int mxSmlGetBoardPowerInfo(unsigned int id, unsigned int *size, mxSmlBoardWayElectricInfo_t *ways) {
    device_t *d;
    unsigned int rc = find(id, &d, 1);
    if (rc != SUCCESS) return rc;
    if (size == NULL || ways == NULL) return INVALID_INPUT;
    if (d->power < 0) return NOT_SUPPORTED;
    if (*size < 2) return INSUFFICIENT_SIZE;
    memset(ways, 0, 2 * sizeof *ways);
    ways[0].power = (unsigned int)(d->power / 2);
    ways[1].power = (unsigned int)(d->power - d->power / 2);
    *size = 2;
    return SUCCESS;
}

unsigned int mxSmlGetDeviceVersion(unsigned int id, unsigned int unit, char *version, unsigned int *size) {
    device_t *d;
    unsigned int rc = find(id, &d, 1);
    if (rc != SUCCESS) return rc;
    if (unit == 0) return copy_text(d->bios, version, size);
    if (unit == 1) return copy_text(d->driver, version, size);
    return NOT_SUPPORTED;
}

unsigned int mxSmlGetMacaVersion(char *version, unsigned int *size) {
    if (!initialised || load() != 0) return FAILURE;
    return copy_text(maca, version, size);
}
