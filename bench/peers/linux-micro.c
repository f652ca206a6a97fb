/*
 * Holdfast micro-benchmark, Linux peer. Runs as a static program from the peer's
 * initramfs and prints one line per figure, each the median over ROUNDS rounds of the
 * mean time per operation within a round:
 *
 *   LINUX-MICRO getppid_ns <ns>               a trivial system call
 *   LINUX-MICRO pipe_round_trip_ns <ns>       8 bytes to a child and back, over two pipes
 *   LINUX-MICRO first_touch_fault_ns <ns>     first write to an anonymous page
 *   LINUX-MICRO signal_handler_fault_ns <ns>  a fault a SIGSEGV handler resolves (mprotect)
 *
 * or `LINUX-MICRO-FAILED <what>: <error>` and exit status 1. Built by the host with
 * `gcc -static -O2` (bench/src/micro/linux.rs); `holdfast bench micro` reads the lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Odd, so that the median is one round's figure. */
#define ROUNDS 11
/* Per round. Sized so that the whole program takes about a second under TCG, where
 * getppid costs ~1.5 us, a pipe round trip ~300 us and a first touch ~30 us. */
#define GETPPID_CALLS 20000
#define PIPE_ROUND_TRIPS 200
#define FAULT_PAGES 512
#define PAGE_BYTES 4096

static void fail(const char *what)
{
    printf("LINUX-MICRO-FAILED %s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec time;
    if (clock_gettime(CLOCK_MONOTONIC, &time) != 0)
        fail("clock_gettime");
    return (int64_t)time.tv_sec * 1000000000 + time.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count)
{
    qsort(values, count, sizeof *values, compare_doubles);
    return values[count / 2];
}

static void report(const char *name, double *per_round_ns)
{
    printf("LINUX-MICRO %s %.1f\n", name, median(per_round_ns, ROUNDS));
    fflush(stdout);
}

static void bench_getppid(void)
{
    double per_round_ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        int64_t start = now_ns();
        for (int call = 0; call < GETPPID_CALLS; call++) {
            /* glibc does not cache getppid: every call enters the kernel. */
            if (getppid() <= 0)
                fail("getppid");
        }
        per_round_ns[round] = (double)(now_ns() - start) / GETPPID_CALLS;
    }
    report("getppid_ns", per_round_ns);
}

static void read_exactly(int fd, char *buffer, size_t length)
{
    size_t done = 0;
    while (done < length) {
        ssize_t count = read(fd, buffer + done, length - done);
        if (count <= 0)
            fail("pipe read");
        done += (size_t)count;
    }
}

static void bench_pipe_round_trip(void)
{
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0)
        fail("pipe");
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        /* The echo: until the parent closes its end, send back every 8 bytes. */
        close(to_child[1]);
        close(to_parent[0]);
        char message[8];
        for (;;) {
            ssize_t count = read(to_child[0], message, sizeof message);
            if (count == 0)
                _exit(0);
            if (count != sizeof message || write(to_parent[1], message, sizeof message) != sizeof message)
                _exit(1);
        }
    }
    close(to_child[0]);
    close(to_parent[1]);
    char message[8] = "holdfast";
    double per_round_ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        int64_t start = now_ns();
        for (int trip = 0; trip < PIPE_ROUND_TRIPS; trip++) {
            if (write(to_child[1], message, sizeof message) != sizeof message)
                fail("pipe write");
            read_exactly(to_parent[0], message, sizeof message);
        }
        per_round_ns[round] = (double)(now_ns() - start) / PIPE_ROUND_TRIPS;
    }
    close(to_child[1]);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errno = ECHILD;
        fail("pipe echo child");
    }
    report("pipe_round_trip_ns", per_round_ns);
}

/* Anonymous read-write pages, never backed by huge pages: one 2 MiB page would resolve
 * 512 first touches with one fault. */
static volatile char *map_pages(void)
{
    void *pages = mmap(NULL, FAULT_PAGES * PAGE_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED)
        fail("mmap");
    if (madvise(pages, FAULT_PAGES * PAGE_BYTES, MADV_NOHUGEPAGE) != 0)
        fail("madvise");
    return pages;
}

static void unmap_pages(volatile char *pages)
{
    if (munmap((void *)pages, FAULT_PAGES * PAGE_BYTES) != 0)
        fail("munmap");
}

static void bench_first_touch_fault(void)
{
    double per_round_ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        volatile char *pages = map_pages();
        int64_t start = now_ns();
        for (int page = 0; page < FAULT_PAGES; page++)
            pages[page * PAGE_BYTES] = 1;
        per_round_ns[round] = (double)(now_ns() - start) / FAULT_PAGES;
        unmap_pages(pages);
    }
    report("first_touch_fault_ns", per_round_ns);
}

static volatile int handled_faults;

/* The nearest Linux has to a keeper: a handler in the faulting process that makes the
 * page accessible; the faulting write is then retried. */
static void make_page_writable(int signal, siginfo_t *info, void *context)
{
    (void)signal;
    (void)context;
    uintptr_t page = (uintptr_t)info->si_addr & ~(uintptr_t)(PAGE_BYTES - 1);
    if (mprotect((void *)page, PAGE_BYTES, PROT_READ | PROT_WRITE) != 0)
        _exit(2);
    handled_faults++;
}

static void bench_signal_handler_fault(void)
{
    struct sigaction action = {0};
    action.sa_sigaction = make_page_writable;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, NULL) != 0)
        fail("sigaction");
    double per_round_ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        volatile char *pages = map_pages();
        /* Populated first and then protected, so that the timed faults are the handler's
         * round trip alone and not also a first touch. */
        for (int page = 0; page < FAULT_PAGES; page++)
            pages[page * PAGE_BYTES] = 1;
        if (mprotect((void *)pages, FAULT_PAGES * PAGE_BYTES, PROT_NONE) != 0)
            fail("mprotect");
        handled_faults = 0;
        int64_t start = now_ns();
        for (int page = 0; page < FAULT_PAGES; page++)
            pages[page * PAGE_BYTES] = 2;
        per_round_ns[round] = (double)(now_ns() - start) / FAULT_PAGES;
        if (handled_faults != FAULT_PAGES) {
            errno = EFAULT;
            fail("signal handler fault count");
        }
        unmap_pages(pages);
    }
    signal(SIGSEGV, SIG_DFL);
    report("signal_handler_fault_ns", per_round_ns);
}

int main(void)
{
    bench_getppid();
    bench_pipe_round_trip();
    bench_first_touch_fault();
    bench_signal_handler_fault();
    return 0;
}
