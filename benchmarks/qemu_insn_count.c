/*
 * A QEMU TCG plugin that counts the guest instructions executed, per translation block.
 *
 * Written for benchmarks/bench_int4_insns.py (devicefit): Debian's qemu-user ships the
 * plugin loader (-plugin) but neither its example plugins (libinsn.so) nor the header, so
 * the few declarations of QEMU's plugin API (include/qemu/qemu-plugin.h, API version 1 of
 * QEMU 7.2) that this file uses are declared here. At exit it writes one line per block,
 * "start_address instructions executions", to the file given as out=PATH; the benchmark
 * charges each block to the function whose symbol holds its start address.
 *
 * Build: cc -shared -fPIC -O2 -o qemu_insn_count.so qemu_insn_count.c
 * Use:   qemu-arm -plugin ./qemu_insn_count.so,out=counts.txt PROGRAM ARGS
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*atexit_cb)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, atexit_cb cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* One block: QEMU adds 1 to `executed` inline each time it runs (single-threaded user
 * mode: one vCPU, so the plain add is exact). A block translated again (same start, same
 * length) reuses its entry. */
struct block {
    uint64_t start;
    uint64_t insns;
    uint64_t executed;
    struct block *next;
};

#define BUCKETS 65536
static struct block *table[BUCKETS];
static char out_path[4096];

static struct block *find(uint64_t start, uint64_t insns)
{
    size_t h = (size_t)((start >> 1) ^ (insns << 17)) % BUCKETS;
    for (struct block *b = table[h]; b != NULL; b = b->next) {
        if (b->start == start && b->insns == insns) {
            return b;
        }
    }
    struct block *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        abort();
    }
    b->start = start;
    b->insns = insns;
    b->next = table[h];
    table[h] = b;
    return b;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    struct block *b = find(qemu_plugin_tb_vaddr(tb), qemu_plugin_tb_n_insns(tb));
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->executed, 1);
}

static void write_counts(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    FILE *f = fopen(out_path, "w");
    if (f == NULL) {
        return;
    }
    for (size_t h = 0; h < BUCKETS; h++) {
        for (struct block *b = table[h]; b != NULL; b = b->next) {
            if (b->executed) {
                fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", b->start, b->insns,
                        b->executed);
            }
        }
    }
    fclose(f);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t *info,
                                                               int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            snprintf(out_path, sizeof(out_path), "%s", argv[i] + 4);
        }
    }
    if (out_path[0] == '\0') {
        fprintf(stderr, "qemu_insn_count: give out=PATH\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, write_counts, NULL);
    return 0;
}
