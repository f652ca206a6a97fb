/*
 * Holdfast store benchmark, Linux peer. Runs as a static program from the peer's
 * initramfs on the raw virtio disk /dev/vda (the same kind of image, attached the same way
 * as Holdfast's store) and prints:
 *
 *   LINUX-STORE raw_write_bytes_per_second <B/s>  <MiB> MiB written sequentially in 1 MiB
 *                                                 O_DIRECT writes, then fdatasync; the
 *                                                 median over <rounds> rounds
 *   LINUX-STORE raw_write_min_bytes_per_second    the same, the slowest round
 *   LINUX-STORE write_flush_ns <ns>               pwrite of 4 KiB (O_DIRECT) + fdatasync,
 *                                                 each timed alone; the median over
 *                                                 ROUNDS rounds of the mean in a round
 *   LINUX-STORE write_flush_max_ns <ns>           the same, the slowest round
 *
 * or `LINUX-STORE-FAILED <what>: <error>` and exit status 1. Usage: linux-store <MiB>
 * <rounds>. Built by the host with `gcc -static -O2` (bench/src/store/linux.rs);
 * `holdfast bench store` reads the lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEVICE "/dev/vda"
#define CHUNK_BYTES (1024 * 1024)
#define SMALL_BYTES 4096
/* Odd, so that the median is one round's figure; as Holdfast's journal rounds. */
#define ROUNDS 11
#define WRITES_PER_ROUND 16
#define ROUNDS_MAX 64

static void fail(const char *what)
{
    printf("LINUX-STORE-FAILED %s: %s\n", what, strerror(errno));
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

static void write_exactly(int fd, const void *buffer, size_t length, off_t offset)
{
    ssize_t written = pwrite(fd, buffer, length, offset);
    if (written != (ssize_t)length) {
        if (written >= 0)
            errno = EIO;
        fail("pwrite");
    }
}

/* Sequential 1 MiB direct writes from the start of the disk, then a flush: the disk's
 * raw write throughput as the guest sees it. */
static void bench_raw_write(int fd, void *chunk, long mib, int rounds)
{
    double per_round[ROUNDS_MAX];
    for (int round = 0; round < rounds; round++) {
        memset(chunk, 'a' + round, CHUNK_BYTES);
        int64_t start = now_ns();
        for (long index = 0; index < mib; index++)
            write_exactly(fd, chunk, CHUNK_BYTES, (off_t)index * CHUNK_BYTES);
        if (fdatasync(fd) != 0)
            fail("fdatasync");
        double seconds = (double)(now_ns() - start) / 1e9;
        per_round[round] = (double)mib * CHUNK_BYTES / seconds;
    }
    printf("LINUX-STORE raw_write_bytes_per_second %.0f\n", median(per_round, rounds));
    /* Sorted by median(): the slowest round first. */
    printf("LINUX-STORE raw_write_min_bytes_per_second %.0f\n", per_round[0]);
    fflush(stdout);
}

/* One 4 KiB direct write and a flush, as a journal commit of one page needs at least. */
static void bench_write_flush(int fd, void *block, off_t offset)
{
    double per_round[ROUNDS];
    uint64_t sequence = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int64_t total = 0;
        for (int write = 0; write < WRITES_PER_ROUND; write++) {
            sequence++;
            memcpy(block, &sequence, sizeof sequence);
            int64_t start = now_ns();
            write_exactly(fd, block, SMALL_BYTES, offset);
            if (fdatasync(fd) != 0)
                fail("fdatasync");
            total += now_ns() - start;
        }
        per_round[round] = (double)total / WRITES_PER_ROUND;
    }
    printf("LINUX-STORE write_flush_ns %.1f\n", median(per_round, ROUNDS));
    /* Sorted by median(): the slowest round last. */
    printf("LINUX-STORE write_flush_max_ns %.1f\n", per_round[ROUNDS - 1]);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        errno = EINVAL;
        fail("usage: linux-store <MiB> <rounds>");
    }
    long mib = strtol(argv[1], NULL, 10);
    int rounds = (int)strtol(argv[2], NULL, 10);
    if (mib <= 0 || rounds <= 0 || rounds > ROUNDS_MAX) {
        errno = EINVAL;
        fail("arguments");
    }
    int fd = open(DEVICE, O_RDWR | O_DIRECT);
    if (fd < 0)
        fail("open " DEVICE);
    void *chunk;
    void *block;
    if (posix_memalign(&chunk, 4096, CHUNK_BYTES) != 0 || posix_memalign(&block, 4096, SMALL_BYTES) != 0) {
        errno = ENOMEM;
        fail("posix_memalign");
    }
    memset(block, 0, SMALL_BYTES);
    bench_write_flush(fd, block, (off_t)mib * CHUNK_BYTES);
    bench_raw_write(fd, chunk, mib, rounds);
    close(fd);
    return 0;
}
