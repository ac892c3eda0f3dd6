/* mpi_allreduce_ref.c — the all-reduce tcl.distributed is compared with (bench/allreduce_bench.lua
 * builds it with mpicc and runs it): MPI_Allreduce (sum) of float32 arrays from 1 KiB to 64 MiB
 * between separate send and receive buffers, osu-style: warm-up calls, then timed calls, each
 * after an untimed barrier so that the ranks start together. Per size it prints
 *   ref <bytes> <median seconds>
 * the larger of the ranks' medians (rank 0 prints). Given a size (bytes), only that size: a
 * process per size, as the tcl side runs (bench/allreduce_bench.lua).
 *
 *   mpicc -O2 -o /tmp/mpi_allreduce_ref bench/mpi_allreduce_ref.c
 *   mpirun -np 2 /tmp/mpi_allreduce_ref [runs [bytes]]   (runs per size, default 50; fewer for large sizes) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MIN_BYTES (1L << 10)
#define MAX_BYTES (64L << 20)

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Timed calls for a size: fewer for the large ones, at least 10. */
static int runs_for(long bytes, int runs) {
    int n = bytes >= (8L << 20) ? runs / 4 : runs;
    return n < 10 ? 10 : n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int runs = argc > 1 ? atoi(argv[1]) : 50;
    if (runs < 1) runs = 50;
    long only = argc > 2 ? atol(argv[2]) : 0; /* one size, or every size from MIN_BYTES */
    if (only < 0 || only > MAX_BYTES || (only && only % 4)) {
        fprintf(stderr, "mpi_allreduce_ref: the size must be a multiple of 4 bytes up to %ld\n", MAX_BYTES);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    float *send = malloc(MAX_BYTES), *recv = malloc(MAX_BYTES);
    double *times = malloc(sizeof *times * (size_t)runs_for(MIN_BYTES, runs)); /* the most runs of a size */
    if (!send || !recv || !times) {
        fprintf(stderr, "mpi_allreduce_ref: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < MAX_BYTES / 4; i++) send[i] = (float)(rank + 1), recv[i] = 0;
    for (long bytes = only ? only : MIN_BYTES; bytes <= (only ? only : MAX_BYTES); bytes *= 2) {
        int count = (int)(bytes / 4), n = runs_for(bytes, runs);
        for (int w = 0; w < 3; w++) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int r = 0; r < n; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double start = MPI_Wtime();
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            times[r] = MPI_Wtime() - start;
        }
        qsort(times, (size_t)n, sizeof *times, compare);
        double median = times[(n - 1) / 2], slowest = 0;
        MPI_Reduce(&median, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("ref %ld %.9g\n", bytes, slowest);
    }
    free(send);
    free(recv);
    free(times);
    MPI_Finalize();
    return 0;
}
