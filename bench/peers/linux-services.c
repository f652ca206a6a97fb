/*
 * Holdfast services benchmark, Linux peer. Runs as a static program from the peer's
 * initramfs and prints two lines per figure: the median over ROUNDS rounds of the mean
 * time per operation within a round (`<name>_ns`), and the slowest round's mean
 * (`<name>_max_ns`):
 *
 *   LINUX-SERVICES fork_exec_wait_ns <ns>    fork, execve of this same static binary with
 *                                            `--exit` (it exits 0 from main), waitpid: a
 *                                            process made, run and gone
 *   LINUX-SERVICES mmap_first_touch_ns <ns>  mmap of 4 KiB anonymous memory and the first
 *                                            write to it (munmap untimed)
 *
 * or `LINUX-SERVICES-FAILED <what>: <error>` and exit status 1. Built by the host with
 * `gcc -static -O2` (bench/src/program_bench.rs); `holdfast bench services` reads the lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Odd, so that the median is one round's figure. As Holdfast's program's. */
#define ROUNDS 11
#define PROCESSES_PER_ROUND 8
#define PAGES_PER_ROUND 32
#define PAGE_BYTES 4096

static void fail(const char *what)
{
    printf("LINUX-SERVICES-FAILED %s: %s\n", what, strerror(errno));
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

/* `name`: the figure's name without its unit. Sorts `per_round_ns`. */
static void report(const char *name, double *per_round_ns)
{
    qsort(per_round_ns, ROUNDS, sizeof *per_round_ns, compare_doubles);
    printf("LINUX-SERVICES %s_ns %.1f\nLINUX-SERVICES %s_max_ns %.1f\n", name,
           per_round_ns[ROUNDS / 2], name, per_round_ns[ROUNDS - 1]);
    fflush(stdout);
}

/* Holdfast's process cycle: made, running (it answers), gone. Here the child execs this
 * binary, which exits at once from main; the parent reaps it. */
static void bench_fork_exec_wait(const char *self)
{
    double per_round_ns[ROUNDS];
    char *const child_argv[] = {(char *)self, "--exit", NULL};
    char *const child_environment[] = {NULL};
    for (int round = 0; round < ROUNDS; round++) {
        int64_t start = now_ns();
        for (int made = 0; made < PROCESSES_PER_ROUND; made++) {
            pid_t child = fork();
            if (child < 0)
                fail("fork");
            if (child == 0) {
                execve(self, child_argv, child_environment);
                _exit(127);
            }
            int status;
            if (waitpid(child, &status, 0) != child)
                fail("waitpid");
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                errno = ECHILD;
                fail("the exec'd child did not exit 0");
            }
        }
        per_round_ns[round] = (double)(now_ns() - start) / PROCESSES_PER_ROUND;
    }
    report("fork_exec_wait", per_round_ns);
}

/* Holdfast's page allocation: a page bought, put into the space and written. Here a 4 KiB
 * anonymous mapping and its first write (which allocates and zeroes the page). */
static void bench_mmap_first_touch(void)
{
    double per_round_ns[ROUNDS];
    volatile char *pages[PAGES_PER_ROUND];
    for (int round = 0; round < ROUNDS; round++) {
        int64_t start = now_ns();
        for (int page = 0; page < PAGES_PER_ROUND; page++) {
            void *mapped = mmap(NULL, PAGE_BYTES, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (mapped == MAP_FAILED)
                fail("mmap");
            pages[page] = mapped;
            pages[page][0] = (char)(round + 1);
        }
        per_round_ns[round] = (double)(now_ns() - start) / PAGES_PER_ROUND;
        /* Untimed, as Holdfast's pages sold back. */
        for (int page = 0; page < PAGES_PER_ROUND; page++) {
            if (pages[page][0] != (char)(round + 1))
                fail("the page lost its write");
            if (munmap((void *)pages[page], PAGE_BYTES) != 0)
                fail("munmap");
        }
    }
    report("mmap_first_touch", per_round_ns);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--exit") == 0)
        return 0;
    bench_fork_exec_wait(argv[0]);
    bench_mmap_first_touch();
    return 0;
}
