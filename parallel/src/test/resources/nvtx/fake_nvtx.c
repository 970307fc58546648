/*
 * A stand-in NVTX library for NvtxTest: exports the NVTX calls symmem4j binds and logs each call, one line
 * per call, readable through fake_nvtx_log. Built by the test with gcc:
 *   -DUSE_NVTX_HEADER -I<cuda>/include  the attribute struct comes from NVIDIA's nvtx3/nvToolsExt.h
 *                                       (NVTX_NO_IMPL: declarations only), so the test checks symmem4j's
 *                                       offsets against the real layout;
 *   -DWITH_DOMAIN                       also the nvtxDomain* calls (else only the default domain's);
 *   -DONLY_ASCII                        only nvtxRangePushA/nvtxRangePop/nvtxMarkA (libnvToolsExt of old);
 *   -DNO_NVTX                           none at all (a library that is not NVTX).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef USE_NVTX_HEADER
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#else
typedef struct nvtxDomainRegistration_st *nvtxDomainHandle_t;
typedef struct nvtxEventAttributes_v2 {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union { uint64_t ullValue; int64_t llValue; double dValue; uint32_t uiValue; int32_t iValue; float fValue; } payload;
    int32_t messageType;
    union { const char *ascii; const void *unicode; void *registered; } message;
} nvtxEventAttributes_t;
#define NVTX_VERSION 3
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 20];
static size_t log_len;
static __thread int depth;

static void append(const char *line) {
    pthread_mutex_lock(&lock);
    size_t n = strlen(line);
    if (log_len + n + 1 < sizeof(log_text)) {
        memcpy(log_text + log_len, line, n);
        log_len += n;
        log_text[log_len++] = '\n';
        log_text[log_len] = 0;
    }
    pthread_mutex_unlock(&lock);
}

/* "name payload=N color=0xAARRGGBB" from an attribute block, or "BAD ..." when its header is not NVTX v3's. */
static void describe(char *out, size_t cap, const nvtxEventAttributes_t *a) {
    if (a->version != NVTX_VERSION || a->size != sizeof(nvtxEventAttributes_t) || a->messageType != 1 || a->colorType != 1) {
        snprintf(out, cap, "BAD version=%u size=%u (expected %u) messageType=%d colorType=%d", a->version, a->size,
                 (unsigned) sizeof(nvtxEventAttributes_t), a->messageType, a->colorType);
        return;
    }
    if (a->payloadType == 1) {
        snprintf(out, cap, "%s payload=%llu color=0x%08X", a->message.ascii,
                 (unsigned long long) a->payload.ullValue, a->color);
    } else if (a->payloadType == 0) {
        snprintf(out, cap, "%s color=0x%08X", a->message.ascii, a->color);
    } else {
        snprintf(out, cap, "BAD payloadType=%d", a->payloadType);
    }
}

int fake_nvtx_log(char *out, int cap) {
    pthread_mutex_lock(&lock);
    int n = (int) (log_len < (size_t) cap - 1 ? log_len : (size_t) cap - 1);
    memcpy(out, log_text, n);
    out[n] = 0;
    pthread_mutex_unlock(&lock);
    return n;
}

void fake_nvtx_reset(void) {
    pthread_mutex_lock(&lock);
    log_len = 0;
    log_text[0] = 0;
    pthread_mutex_unlock(&lock);
}

#ifndef NO_NVTX

int nvtxRangePop(void) {
    append("pop");
    return --depth;
}

#ifdef ONLY_ASCII
int nvtxRangePushA(const char *message) {
    char l[512];
    snprintf(l, sizeof l, "pushA %s", message);
    append(l);
    return depth++;
}

void nvtxMarkA(const char *message) {
    char l[512];
    snprintf(l, sizeof l, "markA %s", message);
    append(l);
}
#else
int nvtxRangePushEx(const nvtxEventAttributes_t *a) {
    char t[448], l[512];
    describe(t, sizeof t, a);
    snprintf(l, sizeof l, "pushEx %s", t);
    append(l);
    return depth++;
}

void nvtxMarkEx(const nvtxEventAttributes_t *a) {
    char t[448], l[512];
    describe(t, sizeof t, a);
    snprintf(l, sizeof l, "markEx %s", t);
    append(l);
}

int nvtxRangePushA(const char *message) {
    char l[512];
    snprintf(l, sizeof l, "pushA %s", message);
    append(l);
    return depth++;
}

void nvtxMarkA(const char *message) {
    char l[512];
    snprintf(l, sizeof l, "markA %s", message);
    append(l);
}
#endif

#ifdef WITH_DOMAIN
static char domain_name[64];

nvtxDomainHandle_t nvtxDomainCreateA(const char *name) {
    char l[128];
    snprintf(domain_name, sizeof domain_name, "%s", name);
    snprintf(l, sizeof l, "create %s", name);
    append(l);
    return (nvtxDomainHandle_t) (void *) domain_name;
}

static const char *domain_of(nvtxDomainHandle_t d) {
    return (void *) d == (void *) domain_name ? domain_name : "UNKNOWN-DOMAIN";
}

int nvtxDomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    char t[448], l[512];
    describe(t, sizeof t, a);
    snprintf(l, sizeof l, "push %s %s", domain_of(d), t);
    append(l);
    return depth++;
}

int nvtxDomainRangePop(nvtxDomainHandle_t d) {
    char l[128];
    snprintf(l, sizeof l, "pop %s", domain_of(d));
    append(l);
    return --depth;
}

void nvtxDomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    char t[448], l[512];
    describe(t, sizeof t, a);
    snprintf(l, sizeof l, "mark %s %s", domain_of(d), t);
    append(l);
}
#endif
#endif
