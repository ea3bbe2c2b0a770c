/* patchset-cores: a preload library (Linux) that shows a test program PATCHSET_CORES_SHOWN cores.
 * test-backend-ops and test-opt take half the cores as their CPU threads, through
 * std::thread::hardware_concurrency(): get_nprocs() in libstdc++, sysconf() in libc++.
 * Unset or not a positive number: the machine's own answers. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/sysinfo.h>
#include <unistd.h>

static int shown(void) {
    const char * text = getenv("PATCHSET_CORES_SHOWN");
    const int n = text ? atoi(text) : 0;
    return n > 0 ? n : 0;
}

// the count shown, else the machine's from the next definition of `name` (glibc's)
static int nprocs(const char * name, int (**real)(void)) {
    const int n = shown();
    if (n) {
        return n;
    }
    if (!*real) {
        *real = (int (*)(void)) dlsym(RTLD_NEXT, name);
    }
    return *real ? (*real)() : 1;
}

int get_nprocs(void) {
    static int (*real)(void);
    return nprocs("get_nprocs", &real);
}

int get_nprocs_conf(void) {
    static int (*real)(void);
    return nprocs("get_nprocs_conf", &real);
}

long sysconf(int name) {
    static long (*real)(int);
    if (name == _SC_NPROCESSORS_ONLN || name == _SC_NPROCESSORS_CONF) {
        const int n = shown();
        if (n) {
            return n;
        }
    }
    if (!real) {
        real = (long (*)(int)) dlsym(RTLD_NEXT, "sysconf");
    }
    return real ? real(name) : -1;
}
