/* btl_doorbell_osc_fix.c -- osc rdma's dynamic windows across nodes,
 * without Open MPI 4.1.1-4.1.4's deadlock.
 *
 * In those releases ompi_osc_rdma_find_dynamic_region, which every
 * operation on a dynamic window calls to find the target's region, takes
 * the target's region lock exclusively; when the target's state is not in
 * this node's shared memory it then refreshes its cached copy of the
 * target's regions, which takes the same lock shared and waits for the
 * exclusive bit to clear -- its own, forever.  Open MPI 4.1.5 removed the
 * exclusive lock (open-mpi/ompi#10518, "osc/rdma: removed deadlock in find
 * dynamic region").  Open MPI's tcp BTL has no atomics, so osc rdma never
 * runs across nodes over it (MPI_Win_create_dynamic fails instead); over
 * this BTL it does, and every MPI_Put to another node's dynamic window
 * hung.
 *
 * The fix brings 4.1.5's behaviour.  The function is called through osc
 * rdma's own PLT, so its slot there points at a wrapper (the GOT
 * redirection of btl_doorbell_got.c).  While a thread runs it, that
 * exclusive lock's two atomics -- a compare-and-swap of 0 with the
 * exclusive bit, then an add of minus that bit on the same lock -- pass
 * through this BTL's atomic entry (btl_doorbell_rdma.c start_atomic),
 * which asks mca_btl_doorbell_osc_fix_elides and, when told, runs neither
 * and reports success (the swap as having found 0).  The shared lock and
 * the reads inside still run.  The state is the thread's own, one level
 * per nested call; a global count of threads inside keeps the check to
 * one load everywhere else.
 */
#include "opal_config.h"
#include "ompi_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>

#include "btl_doorbell_got.h"
#include "btl_doorbell_osc_fix.h"
#include "doorbell.h"

#if OMPI_MAJOR_VERSION == 4 && OMPI_MINOR_VERSION == 1 && OMPI_RELEASE_VERSION >= 1 && \
    OMPI_RELEASE_VERSION <= 4
#define HAS_DEADLOCK 1
#else
#define HAS_DEADLOCK 0
#endif

/* osc rdma's lock word (osc_rdma_types.h): 64 bits where the CPU has 64-bit
 * atomics, the exclusive bit its top one. */
#define LOCK_EXCLUSIVE 0x8000000000000000ull
#define MAX_DEPTH 8
#define SYMBOL "ompi_osc_rdma_find_dynamic_region"

typedef int (*find_fn)(void *module, void *peer, uint64_t base, size_t len, void **region);

static find_fn original;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int32_t threads_inside;

/* One wrapped call: whether its exclusive lock was elided yet, and where. */
typedef struct {
    bool acquired;
    const void *endpoint;
    uint64_t addr;
} call_state_t;

static __thread int depth;
static __thread call_state_t calls[MAX_DEPTH];

static int find_dynamic_region(void *module, void *peer, uint64_t base, size_t len, void **region)
{
    int rc;

    (void) __atomic_fetch_add(&threads_inside, 1, __ATOMIC_RELAXED);
    if (depth < MAX_DEPTH) {
        calls[depth].acquired = false;
    }
    ++depth;
    rc = __atomic_load_n(&original, __ATOMIC_ACQUIRE)(module, peer, base, len, region);
    --depth;
    (void) __atomic_fetch_sub(&threads_inside, 1, __ATOMIC_RELAXED);
    return rc;
}

bool mca_btl_doorbell_osc_fix_elides(const void *endpoint, uint64_t addr, uint32_t aop,
                                     uint64_t operand, uint64_t compare, uint32_t width)
{
    call_state_t *c;

    /* A relaxed load: a thread sees its own increment. */
    if (__builtin_expect(0 == __atomic_load_n(&threads_inside, __ATOMIC_RELAXED), 1) || 0 == depth ||
        depth > MAX_DEPTH || 8 != width) {
        return false;
    }
    c = &calls[depth - 1];
    if (!c->acquired && DOORBELL_AOP_CSWAP == aop && 0 == compare && LOCK_EXCLUSIVE == operand) {
        c->acquired = true;
        c->endpoint = endpoint;
        c->addr = addr;
        return true;
    }
    /* -LOCK_EXCLUSIVE is LOCK_EXCLUSIVE in two's complement */
    if (c->acquired && DOORBELL_AOP_ADD == aop && LOCK_EXCLUSIVE == operand &&
        endpoint == c->endpoint && addr == c->addr) {
        c->acquired = false;
        return true;
    }
    return false;
}

static bool is_osc_rdma(const char *path)
{
    return NULL != strstr(path, "/mca_osc_rdma");
}

/* Under install_lock. */
static void wrap(void *handle)
{
    if (NULL == original) {
        /* read by the wrapper on any thread, once a slot points at it */
        __atomic_store_n(&original, (find_fn) dlsym(handle, SYMBOL), __ATOMIC_RELEASE);
    }
    if (NULL != original) {
        (void) mca_btl_doorbell_got_redirect(SYMBOL, (void *) find_dynamic_region, is_osc_rdma);
    }
}

void mca_btl_doorbell_osc_fix_loaded(void *handle)
{
    if (!HAS_DEADLOCK || NULL == dlsym(handle, SYMBOL)) {
        return;
    }
    pthread_mutex_lock(&install_lock);
    wrap(handle);
    pthread_mutex_unlock(&install_lock);
}

/* The path of an osc rdma already loaded (dlopen may not be called from
 * inside dl_iterate_phdr, which holds the loader's lock). */
static int find_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void) size;
    if (NULL != info->dlpi_name && is_osc_rdma(info->dlpi_name)) {
        (void) snprintf((char *) arg, PATH_MAX, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

bool mca_btl_doorbell_osc_fix_install(void)
{
    char path[PATH_MAX] = "";

    if (!HAS_DEADLOCK) {
        return false;
    }
    pthread_mutex_lock(&install_lock);
    if (0 != dl_iterate_phdr(find_loaded, path)) {
        void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
        if (NULL != h) {
            wrap(h);
            dlclose(h);
        }
    }
    pthread_mutex_unlock(&install_lock);
    return true;
}
