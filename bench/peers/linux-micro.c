/*
 * Holdfast micro-benchmark, Linux peer. Runs as a static program from the peer's
 * initramfs and prints two lines per figure: the median over ROUNDS rounds of the mean
 * time per operation within a round (`<name>_ns`), and the slowest round's mean
 * (`<name>_max_ns`):
 *
 *   LINUX-MICRO getppid_ns <ns>               a trivial system call
 *   LINUX-MICRO pipe_one_way_ns <ns>          8 bytes carrying the writer's clock, from
 *                                             before the write to the blocked reader's wake
 *   LINUX-MICRO pipe_round_trip_ns <ns>       8 bytes to a child and back, over two pipes
 *   LINUX-MICRO first_touch_fault_ns <ns>     first write to an anonymous page
 *   LINUX-MICRO page_cache_fault_ns <ns>      first write, in a new mapping, to a page of a
 *                                             shared file mapping already in the page cache
 *   LINUX-MICRO signal_handler_fault_ns <ns>  a fault a SIGSEGV handler resolves (mprotect)
 *
 * or `LINUX-MICRO-FAILED <what>: <error>` and exit status 1. Built by the host with
 * `gcc -static -O2` (bench/src/program_bench.rs); `holdfast bench micro` reads the lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
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

/* `name`: the figure's name without its unit. */
static void report(const char *name, double *per_round_ns)
{
    double median_ns = median(per_round_ns, ROUNDS);
    /* Sorted by median(). */
    double max_ns = per_round_ns[ROUNDS - 1];
    printf("LINUX-MICRO %s_ns %.1f\nLINUX-MICRO %s_max_ns %.1f\n", name, median_ns, name, max_ns);
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
    report("getppid", per_round_ns);
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

/* One way, as Holdfast's is timed: the writer reads the clock just before its write and
 * sends that reading; the reader, blocked in read() (the writer yields the one CPU first,
 * so the reader has run to its read), reads the clock as soon as it wakes with the
 * message. One CPU and CLOCK_MONOTONIC: one clock for both. The reader sends its figure
 * back, which is not timed. */
static void bench_pipe_one_way(void)
{
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0)
        fail("pipe");
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        int64_t sent_ns;
        for (;;) {
            ssize_t count = read(to_child[0], &sent_ns, sizeof sent_ns);
            int64_t woken_ns = now_ns();
            if (count == 0)
                _exit(0);
            int64_t one_way_ns = woken_ns - sent_ns;
            if (count != sizeof sent_ns
                || write(to_parent[1], &one_way_ns, sizeof one_way_ns) != sizeof one_way_ns)
                _exit(1);
        }
    }
    close(to_child[0]);
    close(to_parent[1]);
    double per_round_ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        int64_t total_ns = 0;
        for (int message = 0; message < PIPE_ROUND_TRIPS; message++) {
            /* The reader is blocked in read() before the clock is read. */
            sched_yield();
            int64_t sent_ns = now_ns();
            if (write(to_child[1], &sent_ns, sizeof sent_ns) != sizeof sent_ns)
                fail("pipe write");
            int64_t one_way_ns;
            read_exactly(to_parent[0], (char *)&one_way_ns, sizeof one_way_ns);
            if (one_way_ns < 0) {
                errno = ERANGE;
                fail("pipe one way: the reader woke before the write");
            }
            total_ns += one_way_ns;
        }
        per_round_ns[round] = (double)total_ns / PIPE_ROUND_TRIPS;
    }
    close(to_child[1]);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        errno = ECHILD;
        fail("pipe one-way child");
    }
    report("pipe_one_way", per_round_ns);
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
    report("pipe_round_trip", per_round_ns);
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
    report("first_touch_fault", per_round_ns);
}

/* The fault that finds its page already there, as Holdfast's node-tree fault does: a file
 * in the initramfs's root (tmpfs or ramfs, page cache only) whose pages were written
 * through write(), mapped shared anew each round, so that no page table maps them; the
 * first write to each page is a minor fault that maps the page-cache page. */
static void bench_page_cache_fault(void)
{
    const char *path = "/page-cache-fault";
    int file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (file < 0)
        fail("open /page-cache-fault");
    static char page_bytes[PAGE_BYTES];
    memset(page_bytes, 1, sizeof page_bytes);
    for (int page = 0; page < FAULT_PAGES; page++) {
        if (write(file, page_bytes, sizeof page_bytes) != sizeof page_bytes)
            fail("write /page-cache-fault");
    }
    double per_round_ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        volatile char *pages = mmap(NULL, FAULT_PAGES * PAGE_BYTES, PROT_READ | PROT_WRITE,
                                    MAP_SHARED, file, 0);
        if (pages == MAP_FAILED)
            fail("mmap /page-cache-fault");
        int64_t start = now_ns();
        for (int page = 0; page < FAULT_PAGES; page++)
            pages[page * PAGE_BYTES] = 2;
        per_round_ns[round] = (double)(now_ns() - start) / FAULT_PAGES;
        unmap_pages(pages);
    }
    if (close(file) != 0 || unlink(path) != 0)
        fail("remove /page-cache-fault");
    report("page_cache_fault", per_round_ns);
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
    report("signal_handler_fault", per_round_ns);
}

int main(void)
{
    bench_getppid();
    bench_pipe_one_way();
    bench_pipe_round_trip();
    bench_first_touch_fault();
    bench_page_cache_fault();
    bench_signal_handler_fault();
    return 0;
}
