/* The policy bundles' decisions from C in a loop (bench_engine.py): flashml_policy_decide over
 * the trace's admission feature rows and flashml_evict_predict over MAT candidate rows, each
 * call timed with clock_gettime. "hot": back to back; "cold": an 8 MiB buffer written between
 * calls (what the IOs between two decisions of a replay do to the caches).
 *   engine_decide_loop ADMIT.so EVICT.so ADM.f64 EV.f64  -> one JSON line */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *rows(const char *path, int width, int *n) {
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) exit(2);
    long size = ftell(f);
    rewind(f);
    double *x = malloc((size_t)size);
    if (!x || fread(x, 1, (size_t)size, f) != (size_t)size) exit(2);
    fclose(f);
    *n = (int)(size / 8 / width);
    return x;
}

#define SWEEP (8u << 20)
static volatile unsigned char sweep[SWEEP];

static void evict_caches(void) {
    for (size_t j = 0; j < SWEEP; j += 64) sweep[j]++;
}

static double p50(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp);
    return t[n / 2];
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    void *a = dlopen(argv[1], RTLD_NOW), *e = dlopen(argv[2], RTLD_NOW);
    if (!a || !e) return 2;
    int (*decide)(const double *, int32_t *, int32_t *) =
        (int (*)(const double *, int32_t *, int32_t *))dlsym(a, "flashml_policy_decide");
    int (*nf)(void) = (int (*)(void))dlsym(a, "flashml_policy_num_features");
    int (*enf)(void) = (int (*)(void))dlsym(e, "flashml_evict_num_features");
    double (*predict)(const double *) = (double (*)(const double *))dlsym(e, "flashml_evict_predict");
    if (!decide || !nf || !enf || !predict) return 2;
    int na, ne, wa = nf(), we = enf();
    double *x = rows(argv[3], wa, &na), *y = rows(argv[4], we, &ne);
    double *t = malloc(sizeof(double) * (size_t)(na > ne ? na : ne));
    double out[2][2];
    long sum = 0;
    for (int cold = 0; cold < 2; cold++) {
        for (int i = 0; i < na; i++) {
            int32_t lo = 0, hi = -1;
            if (cold) evict_caches();
            uint64_t t0 = now_ns();
            sum += decide(x + (size_t)wa * (size_t)i, &lo, &hi) & 1;
            t[i] = (double)(now_ns() - t0);
        }
        out[cold][0] = p50(t, na);
        for (int i = 0; i < ne; i++) {
            if (cold) evict_caches();
            uint64_t t0 = now_ns();
            sum += predict(y + (size_t)we * (size_t)i) > 0.0;
            t[i] = (double)(now_ns() - t0);
        }
        out[cold][1] = p50(t, ne);
    }
    uint64_t c0 = now_ns();
    for (int i = 0; i < 1000; i++) (void)now_ns();
    printf("{\"decisions\": %d, \"eviction_predictions\": %d, \"checksum\": %ld, "
           "\"hot_decide_ns_p50\": %.0f, \"hot_evict_predict_ns_p50\": %.0f, "
           "\"cold_decide_ns_p50\": %.0f, \"cold_evict_predict_ns_p50\": %.0f, "
           "\"clock_ns\": %.1f}\n",
           na, ne, sum, out[0][0], out[0][1], out[1][0], out[1][1], (double)(now_ns() - c0) / 1000.0);
    return 0;
}
