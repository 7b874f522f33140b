/* A host's wall clock, off by SOAK_CLOCK_OFFSET seconds (may be negative): LD_PRELOAD
 * this into pglock. Only CLOCK_REALTIME moves (clock_gettime, gettimeofday, time);
 * CLOCK_MONOTONIC and CLOCK_BOOTTIME, pglock's stopwatch, stay the kernel's.
 *
 * Why not libfaketime: 0.9.10 breaks Python under FAKETIME_DONT_FAKE_MONOTONIC=1
 * (time.sleep fails with EINVAL: its absolute clock_nanosleep is mangled), and without
 * it fakes the monotonic clocks from the wall clock, so threading waits hang (docs/soak.md).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long offset_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void init(void)
{
    const char *value = getenv("SOAK_CLOCK_OFFSET");
    offset_ns = value ? (long long)(atof(value) * 1e9) : 0;
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (!real_clock_gettime)
        init();
    int done = real_clock_gettime(id, ts);
    if (done == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return done;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
