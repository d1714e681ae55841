/* btl_doorbell_rdma.c -- the rest of the RDMA interface osc rdma needs:
 * put and atomics (get is in btl_doorbell_get.c).
 *
 * Same node.  A put is one process_vm_writev into the target's memory,
 * complete at return, as vader's CMA put.  process_vm_* cannot update
 * memory atomically, and a window made by MPI_Win_create is the
 * application's own memory, which no other process can map.  So an atomic
 * is a small message to the target, which runs it with its CPU's atomic
 * instructions on its own memory and answers with the old value (vader's
 * emulation does the same): atomic with every other such op and with the
 * target's own atomics there, which osc rdma mixes on one node
 * (MCA_BTL_ATOMIC_SUPPORTS_GLOB).  The message rings the target's
 * doorbell, so a target asleep in MPI_Recv wakes and answers; one that
 * computes outside MPI answers at its next MPI call, as with vader.
 *
 * Over TCP every op is the core's (doorbell_rma_*): put, get and atomics
 * travel on RMA channels and the target's event thread serves them, so
 * they complete while the target computes or sleeps.  Completions come
 * back through doorbell_reads_done, with the TCP reads
 * (mca_btl_doorbell_reads_progress).
 */
#include "opal_config.h"

#include <errno.h>
#include <string.h>

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"
#include "btl_doorbell_frag.h"
#include "btl_doorbell_osc_fix.h"

/* Same-node atomics: a request and its answer (MCA_BTL_DOORBELL_TAG_ATOMIC). */
#define ATOMIC_REQUEST 1
#define ATOMIC_ANSWER 2

typedef struct {
    uint8_t kind;   /* ATOMIC_REQUEST */
    uint8_t op;     /* DOORBELL_AOP_* (CSWAP included) */
    uint8_t width;  /* 4 or 8 */
    uint8_t pad[5];
    uint64_t id;
    uint64_t addr;
    uint64_t operand; /* CSWAP: the value stored */
    uint64_t compare;
} atomic_request_t;

typedef struct {
    uint8_t kind;   /* ATOMIC_ANSWER */
    uint8_t ok;     /* 0: misaligned or unknown op */
    uint8_t pad[6];
    uint64_t id;
    uint64_t old;
} atomic_answer_t;

/* Atomics waiting for their answer, by id modulo the table's size: a
 * slot is claimed with a CAS, and an answer completes only the op whose
 * id and target it names (a stray answer finds nothing). */
#define PENDING_SLOTS 1024
static mca_btl_doorbell_rdma_op_t *pending[PENDING_SLOTS];
static volatile int64_t next_id;

/* Open MPI's atomic op -> the core's (0: not offered). */
static uint32_t to_aop(mca_btl_base_atomic_op_t op)
{
    switch (op) {
    case MCA_BTL_ATOMIC_ADD: return DOORBELL_AOP_ADD;
    case MCA_BTL_ATOMIC_AND: return DOORBELL_AOP_AND;
    case MCA_BTL_ATOMIC_OR: return DOORBELL_AOP_OR;
    case MCA_BTL_ATOMIC_XOR: return DOORBELL_AOP_XOR;
    case MCA_BTL_ATOMIC_SWAP: return DOORBELL_AOP_SWAP;
    case MCA_BTL_ATOMIC_MIN: return DOORBELL_AOP_MIN;
    case MCA_BTL_ATOMIC_MAX: return DOORBELL_AOP_MAX;
    default: return 0;
    }
}

static mca_btl_doorbell_rdma_op_t *new_op(struct mca_btl_base_module_t *btl,
                                          struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                                          struct mca_btl_base_registration_handle_t *local_handle,
                                          mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                          void *cbdata)
{
    mca_btl_doorbell_rdma_op_t *op = malloc(sizeof(*op));
    if (NULL != op) {
        *op = (mca_btl_doorbell_rdma_op_t){.btl = btl, .endpoint = endpoint,
                                           .local_address = local_address,
                                           .local_handle = local_handle, .cbfunc = cbfunc,
                                           .cbcontext = cbcontext, .cbdata = cbdata, .parts = 1,
                                           .status = OPAL_SUCCESS, .task = endpoint->task};
    }
    return op;
}

/* Send a small control message to a same-node peer, queued behind refused
 * sends if the core refuses it (the descriptor is then the BTL's). */
static int send_small(struct mca_btl_base_endpoint_t *endpoint, const void *msg, size_t len)
{
    mca_btl_doorbell_frag_t *frag = mca_btl_doorbell_frag_get(endpoint->module, len);
    int rc;

    if (OPAL_UNLIKELY(NULL == frag)) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    memcpy(frag->buf, msg, len);
    frag->segments[0].seg_len = len;
    frag->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    rc = mca_btl_doorbell_send(&endpoint->module->super, endpoint, &frag->base,
                               MCA_BTL_DOORBELL_TAG_ATOMIC);
    if (rc < 0) {
        mca_btl_doorbell_frag_return(frag);
        return rc;
    }
    return OPAL_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* same node                                                           */

static int shm_atomic(mca_btl_doorbell_rdma_op_t *op, uint32_t aop, uint32_t width, uint64_t addr,
                      uint64_t operand, uint64_t compare)
{
    mca_btl_doorbell_module_t *main = ((mca_btl_doorbell_module_t *) op->btl)->main;
    int64_t id = OPAL_THREAD_ADD_FETCH64(&next_id, 1);
    size_t slot = (size_t) id % PENDING_SLOTS;
    mca_btl_doorbell_rdma_op_t *none = NULL;
    atomic_request_t req = {.kind = ATOMIC_REQUEST, .op = (uint8_t) aop, .width = (uint8_t) width,
                            .id = (uint64_t) id, .addr = addr, .operand = operand,
                            .compare = compare};
    int rc;

    op->id = (uint64_t) id;
    op->width = width;
    if (!__atomic_compare_exchange_n(&pending[slot], &none, op, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        /* 1024 atomics in flight: osc rdma tries again later */
        free(op);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    rc = send_small(op->endpoint, &req, sizeof(req));
    if (OPAL_UNLIKELY(OPAL_SUCCESS != rc)) {
        __atomic_store_n(&pending[slot], NULL, __ATOMIC_RELEASE);
        free(op);
        return rc;
    }
    main->shm_atomics++;
    return OPAL_SUCCESS;
}

/* An atomic's old value into the initiator's result (NULL: none wanted),
 * `width` bytes of it. */
static void store_old(void *dst, uint64_t old, uint32_t width)
{
    if (NULL == dst) {
        return;
    }
    if (8 == width) {
        memcpy(dst, &old, 8);
    } else {
        uint32_t v = (uint32_t) old;
        memcpy(dst, &v, 4);
    }
}

/* Run an atomic on this process's memory; false if it cannot be run. */
static bool run_atomic(const atomic_request_t *r, uint64_t *old)
{
    if (0 != r->addr % r->width || (4 != r->width && 8 != r->width)) {
        return false;
    }
#define RUN(T)                                                                                  \
    do {                                                                                        \
        T *p = (T *) (uintptr_t) r->addr, v = (T) r->operand, was;                              \
        switch (r->op) {                                                                        \
        case DOORBELL_AOP_ADD: was = __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); break;         \
        case DOORBELL_AOP_AND: was = __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); break;         \
        case DOORBELL_AOP_OR: was = __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); break;           \
        case DOORBELL_AOP_XOR: was = __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); break;         \
        case DOORBELL_AOP_SWAP: was = __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); break;       \
        case DOORBELL_AOP_CSWAP:                                                                \
            was = (T) r->compare;                                                               \
            (void) __atomic_compare_exchange_n(p, &was, v, false, __ATOMIC_SEQ_CST,             \
                                               __ATOMIC_SEQ_CST);                               \
            break;                                                                              \
        case DOORBELL_AOP_MIN:                                                                  \
        case DOORBELL_AOP_MAX:                                                                  \
            was = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                         \
            while ((DOORBELL_AOP_MIN == r->op ? v < was : v > was) &&                           \
                   !__atomic_compare_exchange_n(p, &was, v, false, __ATOMIC_SEQ_CST,            \
                                                __ATOMIC_SEQ_CST)) {                            \
            }                                                                                   \
            break;                                                                              \
        default: return false;                                                                  \
        }                                                                                       \
        *old = (uint64_t) was;                                                                  \
    } while (0)
    if (8 == r->width) {
        RUN(int64_t);
    } else {
        RUN(int32_t);
        *old = (uint32_t) *old;
    }
#undef RUN
    return true;
}

void mca_btl_doorbell_atomic_recv(mca_btl_doorbell_module_t *module, uint32_t task,
                                  const uint8_t *data, size_t len)
{
    uint8_t kind = len > 0 ? data[0] : 0;

    if (ATOMIC_REQUEST == kind && len == sizeof(atomic_request_t)) {
        atomic_request_t r;
        atomic_answer_t a = {.kind = ATOMIC_ANSWER};
        mca_btl_doorbell_endpoint_t *ep = task < module->npeers_alloc ? module->peers[task] : NULL;

        memcpy(&r, data, sizeof(r));
        if (NULL == ep || ep->lost) {
            return;
        }
        a.id = r.id;
        a.ok = run_atomic(&r, &a.old);
        module->atomics_served++;
        if (OPAL_SUCCESS != send_small(ep, &a, sizeof(a))) {
            opal_output(0, "btl doorbell: could not answer an atomic of task %u", task);
        }
        return;
    }
    if (ATOMIC_ANSWER == kind && len == sizeof(atomic_answer_t)) {
        atomic_answer_t a;
        memcpy(&a, data, sizeof(a));
        size_t slot = (size_t) a.id % PENDING_SLOTS;
        mca_btl_doorbell_rdma_op_t *op = __atomic_load_n(&pending[slot], __ATOMIC_ACQUIRE);
        /* only the op it answers, once */
        if (NULL == op || op->id != a.id || op->task != task ||
            !__atomic_compare_exchange_n(&pending[slot], &op, NULL, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            return;
        }
        if (a.ok) {
            store_old(op->local_address, a.old, op->width);
        }
        mca_btl_doorbell_rdma_op_end(module, op, a.ok ? OPAL_SUCCESS : OPAL_ERR_BAD_PARAM);
        return;
    }
    opal_output(0, "btl doorbell: dropped a malformed %zu-byte atomic message from task %u", len,
                task);
}

/* ------------------------------------------------------------------ */
/* over TCP                                                            */

/* Start `op` as one core op; OPAL_SUCCESS, or why not (op freed). */
static int tcp_started(mca_btl_doorbell_module_t *main, mca_btl_doorbell_rdma_op_t *op, int rc)
{
    if (OPAL_UNLIKELY(DOORBELL_OK != rc)) {
        OPAL_THREAD_ADD_FETCH32(&main->nreads, -1);
        free(op);
        if (DOORBELL_ERR_WOULD_BLOCK != rc) {
            opal_output_verbose(1, mca_btl_doorbell_component.output,
                                "btl doorbell: an RMA operation over TCP failed: %s",
                                doorbell_error_string(rc));
        }
        return mca_btl_doorbell_status_to_opal(rc);
    }
    main->rma_ops++;
    return OPAL_SUCCESS;
}

static int tcp_atomic(mca_btl_doorbell_rdma_op_t *op, struct mca_btl_base_registration_handle_t *remote_handle,
                      uint32_t aop, uint32_t width, uint64_t addr, uint64_t operand, uint64_t compare)
{
    mca_btl_doorbell_module_t *main = ((mca_btl_doorbell_module_t *) op->btl)->main;

    if (OPAL_UNLIKELY(NULL == remote_handle || !remote_handle->rma)) {
        free(op);
        return OPAL_ERR_NOT_AVAILABLE;
    }
    OPAL_THREAD_ADD_FETCH32(&main->nreads, 1);
    return tcp_started(main, op,
                       doorbell_rma_atomic(main->core, op->endpoint->task, MCA_BTL_DOORBELL_WINDOW,
                                           aop, width, operand, compare, op->local_address, addr,
                                           remote_handle->key, (uint64_t) (uintptr_t) op));
}

/* ------------------------------------------------------------------ */
/* the BTL functions                                                   */

int mca_btl_doorbell_put(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                         void *local_address, uint64_t remote_address,
                         struct mca_btl_base_registration_handle_t *local_handle,
                         struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                         int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                         void *cbcontext, void *cbdata)
{
    mca_btl_doorbell_module_t *main = ((mca_btl_doorbell_module_t *) btl)->main;
    (void) flags;
    (void) order;

    endpoint = mca_btl_doorbell_rdma_endpoint(endpoint);
    if (OPAL_UNLIKELY(endpoint->lost)) {
        return OPAL_ERR_UNREACH;
    }
    if (endpoint->task == main->my_task) {
        /* this process's own memory (osc rdma's state across nodes) */
        memmove((void *) (uintptr_t) remote_address, local_address, size);
        cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
        return OPAL_SUCCESS;
    }
    if (endpoint->module == &mca_btl_doorbell_tcp_module) {
        mca_btl_doorbell_rdma_op_t *op;
        if (OPAL_UNLIKELY(NULL == remote_handle || !remote_handle->rma || size > MCA_BTL_DOORBELL_RMA_MAX)) {
            return OPAL_ERR_NOT_AVAILABLE;
        }
        op = new_op(btl, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
        if (OPAL_UNLIKELY(NULL == op)) {
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        OPAL_THREAD_ADD_FETCH32(&main->nreads, 1);
        /* the core copies the bytes before it returns; the callback waits
         * for the target's answer (osc rdma counts a put done then) */
        return tcp_started(main, op,
                           doorbell_rma_put(main->core, endpoint->task, MCA_BTL_DOORBELL_WINDOW,
                                            local_address, size, remote_address,
                                            remote_handle->key, (uint64_t) (uintptr_t) op));
    }
    if (OPAL_UNLIKELY(!endpoint->cma)) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (OPAL_UNLIKELY(OPAL_SUCCESS != mca_btl_doorbell_cma(endpoint->pid, local_address, remote_address,
                                                           size, true))) {
        opal_output(0, "btl doorbell: writing %zu bytes to task %u (pid %d) failed: %s", size,
                    endpoint->task, (int) endpoint->pid, strerror(errno));
        return OPAL_ERROR;
    }
    main->single_copy_writes++;
    /* in the target's memory: complete now, as vader's CMA put does */
    cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
    return OPAL_SUCCESS;
}

static int start_atomic(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                        void *local_address, uint64_t remote_address,
                        struct mca_btl_base_registration_handle_t *local_handle,
                        struct mca_btl_base_registration_handle_t *remote_handle, uint32_t aop,
                        uint64_t operand, uint64_t compare, int flags,
                        mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    uint32_t width = (flags & MCA_BTL_ATOMIC_FLAG_32BIT) ? 4 : 8;
    mca_btl_doorbell_module_t *main = ((mca_btl_doorbell_module_t *) btl)->main;
    mca_btl_doorbell_rdma_op_t *op;

    endpoint = mca_btl_doorbell_rdma_endpoint(endpoint);
    if (OPAL_UNLIKELY(endpoint->lost)) {
        return OPAL_ERR_UNREACH;
    }
    if (OPAL_UNLIKELY(0 == aop || (flags & MCA_BTL_ATOMIC_FLAG_FLOAT))) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    /* Open MPI 4.1.1-4.1.4's self-deadlocking region lock of osc rdma's
     * dynamic windows: run by nobody (hooks/btl_doorbell_osc_fix.c) */
    if (OPAL_UNLIKELY(mca_btl_doorbell_osc_fix_elides(endpoint, remote_address, aop, operand, compare,
                                                      width))) {
        if (NULL != local_address) {
            store_old(local_address, 0, width);
        }
        cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
        return OPAL_SUCCESS;
    }
    if (endpoint->task == main->my_task) {
        /* this process's own memory: its CPU's atomic, as a target runs it */
        atomic_request_t r = {.kind = ATOMIC_REQUEST, .op = (uint8_t) aop, .width = (uint8_t) width,
                              .addr = remote_address, .operand = operand, .compare = compare};
        uint64_t old = 0;
        bool ok = run_atomic(&r, &old);
        if (ok) {
            store_old(local_address, old, width);
        }
        cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata,
               ok ? OPAL_SUCCESS : OPAL_ERR_BAD_PARAM);
        return OPAL_SUCCESS;
    }
    op = new_op(btl, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
    if (OPAL_UNLIKELY(NULL == op)) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    /* Memory registered for RMA channels (osc rdma chose the TCP module:
     * ranks on other nodes) is served by the target's event thread, also
     * for a same-node initiator: osc rdma then keeps its locks there too,
     * and a target that computes outside MPI must still grant them.  Only
     * the TCP module registers memory: through the shm module osc rdma
     * hands a handle of size 0, a pointer to whatever follows it (on a
     * dynamic window, the next attached region's bounds). */
    if (endpoint->module == &mca_btl_doorbell_tcp_module ||
        (btl == &mca_btl_doorbell_tcp_module.super && NULL != remote_handle && remote_handle->rma &&
         0 != remote_handle->key)) {
        return tcp_atomic(op, remote_handle, aop, width, remote_address, operand, compare);
    }
    return shm_atomic(op, aop, width, remote_address, operand, compare);
}

int mca_btl_doorbell_atomic_op(struct mca_btl_base_module_t *btl,
                               struct mca_btl_base_endpoint_t *endpoint, uint64_t remote_address,
                               struct mca_btl_base_registration_handle_t *remote_handle,
                               mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                               mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                               void *cbdata)
{
    (void) order;
    return start_atomic(btl, endpoint, NULL, remote_address, NULL, remote_handle, to_aop(op), operand,
                        0, flags, cbfunc, cbcontext, cbdata);
}

int mca_btl_doorbell_atomic_fop(struct mca_btl_base_module_t *btl,
                                struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                                uint64_t remote_address,
                                struct mca_btl_base_registration_handle_t *local_handle,
                                struct mca_btl_base_registration_handle_t *remote_handle,
                                mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                                mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                void *cbdata)
{
    (void) order;
    return start_atomic(btl, endpoint, local_address, remote_address, local_handle, remote_handle,
                        to_aop(op), operand, 0, flags, cbfunc, cbcontext, cbdata);
}

int mca_btl_doorbell_atomic_cswap(struct mca_btl_base_module_t *btl,
                                  struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                                  uint64_t remote_address,
                                  struct mca_btl_base_registration_handle_t *local_handle,
                                  struct mca_btl_base_registration_handle_t *remote_handle,
                                  uint64_t compare, uint64_t value, int flags, int order,
                                  mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                  void *cbdata)
{
    (void) order;
    return start_atomic(btl, endpoint, local_address, remote_address, local_handle, remote_handle,
                        DOORBELL_AOP_CSWAP, value, compare, flags, cbfunc, cbcontext, cbdata);
}

void mca_btl_doorbell_rdma_setup(mca_btl_base_module_t *shm, mca_btl_base_module_t *tcp)
{
    const uint32_t rdma = MCA_BTL_FLAGS_RDMA | MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_ATOMIC_FOPS;
    /* Atomics run as the target CPU's own (GLOB: osc rdma may mix them
     * with its CPU atomics on the same memory). */
    const uint32_t atomics = MCA_BTL_ATOMIC_SUPPORTS_ADD | MCA_BTL_ATOMIC_SUPPORTS_AND |
                             MCA_BTL_ATOMIC_SUPPORTS_OR | MCA_BTL_ATOMIC_SUPPORTS_XOR |
                             MCA_BTL_ATOMIC_SUPPORTS_SWAP | MCA_BTL_ATOMIC_SUPPORTS_MIN |
                             MCA_BTL_ATOMIC_SUPPORTS_MAX | MCA_BTL_ATOMIC_SUPPORTS_CSWAP |
                             MCA_BTL_ATOMIC_SUPPORTS_32BIT | MCA_BTL_ATOMIC_SUPPORTS_GLOB;
    mca_btl_base_module_t *m[2] = {shm, tcp};

    /* osc rdma needs one module that reaches every rank of a window.  On
     * one node that is the shm module; with ranks on other nodes, the TCP
     * module, which then also reaches this process and its same-node
     * peers by RDMA-only aliases (btl_doorbell_module.c `reach`), whose ops
     * take the shared-memory path all the same.  What makes the choice
     * unambiguous:
     *  - exclusivity: the TCP module's is lower, so bml keeps it off the
     *    send lists of same-node peers;
     *  - latency: where both reach every rank (one node), the shm module's
     *    lower latency wins;
     *  - GLOB, which osc rdma counts as reaching the caller itself, only
     *    on the TCP module: the shm module reaches the caller already, and
     *    counted twice it would pass for reaching all ranks of a two-node
     *    job with one rank per node, where each rank then picks a module
     *    by the order it met the others in (one that does not reach its
     *    peer: a NULL peer in osc rdma's first MPI_Put). */
    tcp->btl_exclusivity = shm->btl_exclusivity > 0 ? shm->btl_exclusivity - 1 : 0;
    if (tcp->btl_latency <= shm->btl_latency) {
        tcp->btl_latency = shm->btl_latency + 1;
    }

    for (int i = 0; i < 2; ++i) {
        m[i]->btl_put = mca_btl_doorbell_put;
        m[i]->btl_atomic_op = mca_btl_doorbell_atomic_op;
        m[i]->btl_atomic_fop = mca_btl_doorbell_atomic_fop;
        m[i]->btl_atomic_cswap = mca_btl_doorbell_atomic_cswap;
        m[i]->btl_flags |= rdma;
        m[i]->btl_atomic_flags = atomics;
        m[i]->btl_put_alignment = 0;
        m[i]->btl_put_local_registration_threshold = SIZE_MAX;
        m[i]->btl_get_local_registration_threshold = SIZE_MAX;
    }
    shm->btl_atomic_flags &= ~MCA_BTL_ATOMIC_SUPPORTS_GLOB;
    shm->btl_put_limit = SIZE_MAX;
    tcp->btl_put_limit = MCA_BTL_DOORBELL_RMA_MAX;
}
