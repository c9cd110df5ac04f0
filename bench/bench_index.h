/* Helpers the index suites share (bench_index.c, bench_mixed.c). */
#ifndef KVP_BENCH_INDEX_H
#define KVP_BENCH_INDEX_H

#include <stddef.h>
#include <stdint.h>

#define NOW_MS 1800000000000ull

uint64_t kvp_bi_rnd(void);
/* "--flag 16M" (k, M, G: powers of two) or dflt. */
size_t kvp_bi_size_arg(int argc, char **argv, const char *flag, size_t dflt);
double kvp_bi_double_arg(int argc, char **argv, const char *flag, double dflt);
/* "16M" for 16 << 20 (figure names). */
void kvp_bi_label(char *out, size_t len, size_t n);

#endif
