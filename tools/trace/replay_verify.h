/* replay_verify.h: the overlap check of the replay engine: a pattern derived
 * from an allocation's id, written into its block at alloc and checked at
 * free. */
#ifndef XSEG_REPLAY_VERIFY_H
#define XSEG_REPLAY_VERIFY_H

#include <stdint.h>

typedef struct replay_mismatch {
    uint64_t offset;   /* first byte that differs */
    uint8_t expected;
    uint8_t found;
} replay_mismatch;

/* Write the pattern of `id` into the first and last 64 bytes and the first
 * 64 bytes of every MiB of the block p[0, bytes). */
void replay_verify_write(void *p, uint64_t bytes, uint64_t id);
/* 0 when the pattern is intact, else -1 with the first mismatch in *m. */
int replay_verify_check(const void *p, uint64_t bytes, uint64_t id, replay_mismatch *m);

#endif /* XSEG_REPLAY_VERIFY_H */
