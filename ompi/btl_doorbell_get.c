/* btl_doorbell_get.c -- registration and gets: single-copy reads from a
 * same-node peer (CMA), over the TCP connection from a peer on another
 * node (ob1's RGET), or over RMA channels (osc rdma's windows).
 *
 * A large message through the ring costs two copies: the sender's into the
 * ring, the receiver's out of it.  With MCA_BTL_FLAGS_GET, ob1 sends large
 * contiguous messages by RGET instead: the sender announces its buffer's
 * address (through the ring, which rings the receiver's doorbell), the
 * receiver reads it straight into the user's buffer with
 * process_vm_readv, and tells the sender with a FIN message.  One copy, as
 * vader's CMA path does.
 *
 * It needs the peer's pid (published in the modex beside the core's
 * address) and permission to read its memory: a probe at connect time reads
 * a known word of the peer; if that fails (another pid namespace, a ptrace
 * policy), GET is turned off for every later peer and messages keep to the
 * ring.
 *
 * Over TCP the TCP module offers GET too, as btl tcp offers PUT: without
 * it a large message crossed the receiver's memory twice (a frame body,
 * then ob1's copy into the user's buffer), which held its bandwidth to
 * 0.3-0.5x btl tcp's.  ob1 registers the buffer it sends (register_mem
 * below: the core exposes that range to that peer only, under a key the
 * RGET header carries); the receiver's get asks the core to read it
 * (doorbell_read): the sender's core answers from the user's buffer and
 * the receiver's core receives straight into the user's buffer.  The
 * read ends asynchronously: progress polls the core for ended reads and
 * runs ob1's completion callbacks.
 */
#include "opal_config.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <stdlib.h>

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"

/* The handle of a buffer nobody reads remotely (ob1 registers the
 * receiving side of a get too, and osc rdma its fragments). */
static mca_btl_base_registration_handle_t local_only = {.key = 0};

mca_btl_base_registration_handle_t *mca_btl_doorbell_register_mem(struct mca_btl_base_module_t *btl,
                                                                  struct mca_btl_base_endpoint_t *endpoint,
                                                                  void *base, size_t size, uint32_t flags)
{
    mca_btl_doorbell_module_t *module = (mca_btl_doorbell_module_t *) btl;
    mca_btl_base_registration_handle_t *h;
    uint32_t access = 0;

    if (flags & MCA_BTL_REG_FLAG_REMOTE_READ) {
        access |= DOORBELL_RMA_READ;
    }
    if (flags & MCA_BTL_REG_FLAG_REMOTE_WRITE) {
        access |= DOORBELL_RMA_WRITE;
    }
    if (flags & MCA_BTL_REG_FLAG_REMOTE_ATOMIC) {
        access |= DOORBELL_RMA_ATOMIC;
    }
    if (MCA_BTL_ENDPOINT_ANY == endpoint) {
        /* osc rdma's window (or state): every peer, over RMA channels */
        if (0 == access) {
            return &local_only;
        }
        h = malloc(sizeof(*h));
        if (NULL == h) {
            return NULL;
        }
        *h = (mca_btl_base_registration_handle_t){.rma = 1};
        if (DOORBELL_OK != doorbell_expose_rma(module->main->core, base, size, access, &h->key)) {
            free(h);
            return NULL;
        }
        return h;
    }
    if (!(flags & MCA_BTL_REG_FLAG_REMOTE_READ)) {
        return &local_only;
    }
    /* ob1's RGET: a range is exposed to one peer */
    if (NULL == endpoint || endpoint->lost) {
        return NULL;
    }
    /* NULL: ob1 sends this message by rendezvous and fragments instead */
    if (module == &mca_btl_doorbell_tcp_module && size < mca_btl_doorbell_component.tcp_min_rget_size) {
        return NULL;
    }
    h = malloc(sizeof(*h));
    if (NULL == h) {
        return NULL;
    }
    *h = (mca_btl_base_registration_handle_t){.rma = 0};
    if (DOORBELL_OK != doorbell_expose(module->main->core, endpoint->task, base, size, &h->key)) {
        free(h);
        return NULL;
    }
    return h;
}

int mca_btl_doorbell_deregister_mem(struct mca_btl_base_module_t *btl,
                                    mca_btl_base_registration_handle_t *handle)
{
    mca_btl_doorbell_module_t *module = (mca_btl_doorbell_module_t *) btl;

    if (NULL == handle || &local_only == handle) {
        return OPAL_SUCCESS;
    }
    /* the core copies out what a socket still holds of it first */
    (void) doorbell_unexpose(module->main->core, handle->key);
    free(handle);
    return OPAL_SUCCESS;
}

int mca_btl_doorbell_status_to_opal(int rc)
{
    switch (rc) {
    case DOORBELL_OK:
        return OPAL_SUCCESS;
    case DOORBELL_ERR_WOULD_BLOCK:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case DOORBELL_ERR_PEER_LOST:
    case DOORBELL_ERR_UNKNOWN_TASK:
    case DOORBELL_ERR_NETWORK:
        return OPAL_ERR_UNREACH;
    case DOORBELL_ERR_INVALID_ARGUMENT:
    case DOORBELL_ERR_BAD_LENGTH:
        return OPAL_ERR_BAD_PARAM;
    default:
        return OPAL_ERROR;
    }
}

void mca_btl_doorbell_rdma_op_end(mca_btl_doorbell_module_t *module, mca_btl_doorbell_rdma_op_t *op,
                                  int status)
{
    (void) module;
    if (OPAL_SUCCESS != status) {
        int32_t none = OPAL_SUCCESS;
        (void) opal_atomic_compare_exchange_strong_32(&op->status, &none, status);
    }
    /* the issuing thread and a progress pass may end parts at once */
    if (OPAL_THREAD_ADD_FETCH32(&op->parts, -1) > 0) {
        return;
    }
    op->cbfunc(op->btl, op->endpoint, op->local_address, op->local_handle, op->cbcontext,
               op->cbdata, op->status);
    free(op);
}

/* A get over TCP: ob1's RGET (a read over the message connection), or osc
 * rdma's (RMA channels, in pieces of at most the core's largest op). */
static int tcp_get(mca_btl_doorbell_module_t *module, struct mca_btl_base_endpoint_t *endpoint,
                   void *local_address, uint64_t remote_address,
                   struct mca_btl_base_registration_handle_t *local_handle,
                   struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                   mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    mca_btl_doorbell_module_t *main = module->main;
    mca_btl_doorbell_rdma_op_t *op;
    int rc = DOORBELL_OK;
    size_t done = 0;

    if (OPAL_UNLIKELY(NULL == remote_handle || 0 == remote_handle->key)) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    op = malloc(sizeof(*op));
    if (OPAL_UNLIKELY(NULL == op)) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    *op = (mca_btl_doorbell_rdma_op_t){.btl = &module->super, .endpoint = endpoint,
                                       .local_address = local_address, .local_handle = local_handle,
                                       .cbfunc = cbfunc, .cbcontext = cbcontext, .cbdata = cbdata,
                                       .parts = 1, .status = OPAL_SUCCESS};
    /* The extra part (the 1 above) keeps the op alive while its pieces
     * start: a progress pass on another thread may end them at once. */
    do {
        size_t piece = remote_handle->rma && size - done > MCA_BTL_DOORBELL_RMA_MAX
                           ? MCA_BTL_DOORBELL_RMA_MAX
                           : size - done;
        OPAL_THREAD_ADD_FETCH32(&main->nreads, 1);
        OPAL_THREAD_ADD_FETCH32(&op->parts, 1);
        if (remote_handle->rma) {
            rc = doorbell_rma_get(main->core, endpoint->task, MCA_BTL_DOORBELL_WINDOW,
                                  (char *) local_address + done, piece, remote_address + done,
                                  remote_handle->key, (uint64_t) (uintptr_t) op);
        } else {
            rc = doorbell_read(main->core, endpoint->task, MCA_BTL_DOORBELL_WINDOW, local_address,
                               size, remote_address, remote_handle->key, (uint64_t) (uintptr_t) op);
        }
        if (OPAL_UNLIKELY(DOORBELL_OK != rc)) {
            OPAL_THREAD_ADD_FETCH32(&main->nreads, -1);
            OPAL_THREAD_ADD_FETCH32(&op->parts, -1);
            break;
        }
        done += piece;
    } while (done < size);

    if (OPAL_UNLIKELY(DOORBELL_OK != rc && 0 == done)) {
        /* nothing started: the caller hears it now, no callback */
        free(op);
        if (DOORBELL_ERR_WOULD_BLOCK == rc) {
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        opal_output(0, "btl doorbell: reading %zu bytes from task %u over TCP failed: %s",
                    size, endpoint->task, doorbell_error_string(rc));
        return mca_btl_doorbell_status_to_opal(rc);
    }
    if (remote_handle->rma) {
        main->rma_ops++;
    } else {
        main->tcp_reads++;
    }
    /* a piece that did not start fails the op when the others end */
    mca_btl_doorbell_rdma_op_end(main, op, mca_btl_doorbell_status_to_opal(rc));
    return OPAL_SUCCESS;
}

int mca_btl_doorbell_reads_progress(mca_btl_doorbell_module_t *module)
{
    doorbell_read_result done[16];
    int n, count = 0;

    do {
        n = doorbell_reads_done(module->core, MCA_BTL_DOORBELL_WINDOW, done, 16);
        for (int i = 0; i < n; ++i) {
            mca_btl_doorbell_rdma_op_t *op = (mca_btl_doorbell_rdma_op_t *) (uintptr_t) done[i].cookie;
            OPAL_THREAD_ADD_FETCH32(&module->nreads, -1);
            mca_btl_doorbell_rdma_op_end(module, op, mca_btl_doorbell_status_to_opal(done[i].status));
        }
        count += n > 0 ? n : 0;
    } while (16 == n);
    /* Data for a read arrived: this rank is receiving, not idle (its
     * adaptive spin must not take the gaps between completions for idle
     * waits and learn to sleep through a stream). */
    if (0 == count && module->nreads && doorbell_reads_moved(module->core) > 0) {
        count = 1;
    }
    return count;
}

/* The word a peer reads to check that it can read this process. */
const uint64_t mca_btl_doorbell_cma_probe_word = 0x646f6f7262656c6cull; /* "doorbell" */

int mca_btl_doorbell_cma(pid_t pid, void *local, uint64_t remote, size_t size, bool write)
{
    size_t done = 0;

    while (done < size) {
        struct iovec l = {.iov_base = (char *) local + done, .iov_len = size - done};
        struct iovec r = {.iov_base = (void *) (uintptr_t) (remote + done), .iov_len = size - done};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (EINTR == errno) {
                continue;
            }
            return OPAL_ERROR;
        }
        if (0 == n) {
            return OPAL_ERROR;
        }
        done += (size_t) n;
    }
    return OPAL_SUCCESS;
}

bool mca_btl_doorbell_cma_probe(pid_t pid, uint64_t probe_address)
{
    uint64_t word = 0;
    return pid > 0 && 0 != probe_address &&
           OPAL_SUCCESS == mca_btl_doorbell_cma(pid, &word, probe_address, sizeof(word), false) &&
           word == mca_btl_doorbell_cma_probe_word;
}

/* A same-node get by process_vm_readv; OPAL_SUCCESS or OPAL_ERROR (said). */
static int cma_get(mca_btl_doorbell_module_t *main, struct mca_btl_base_endpoint_t *endpoint,
                   void *local_address, uint64_t remote_address, size_t size)
{
    if (OPAL_UNLIKELY(OPAL_SUCCESS != mca_btl_doorbell_cma(endpoint->pid, local_address, remote_address, size, false))) {
        opal_output(0, "btl doorbell: reading %zu bytes from task %u (pid %d) failed: %s",
                    size, endpoint->task, (int) endpoint->pid, strerror(errno));
        return OPAL_ERROR;
    }
    main->single_copy_reads++;
    return OPAL_SUCCESS;
}

/* ---- gets deferred to the next pass ----
 *
 * ob1 matches a message that came before its receive inside MPI_Irecv, and
 * starts an RGET's read there.  Read at once, a window of osu_bibw (each
 * rank posts 64 receives of 1 MiB, then 64 sends, then waits) went wrong
 * whenever one rank came to the window late: the peer's 64 RGET headers
 * were already there, and the late rank read up to 16 MiB inside its
 * MPI_Irecv calls before it posted its own sends, while the peer, with
 * nothing to read, waited; the two ranks read one after the other instead
 * of at once.  A rank that slept through the end of the previous window
 * comes late that way.  So a large get asked for outside a pass of ours is
 * queued, and the next pass (in the MPI_Wait that follows, or any other
 * progress) reads it.  Inside a pass the read stays immediate: the rank
 * is already waiting, and the next pass would only come later. */
typedef struct mca_btl_doorbell_deferred_get_t {
    struct mca_btl_doorbell_deferred_get_t *next;
    struct mca_btl_base_module_t *btl;
    struct mca_btl_base_endpoint_t *endpoint;
    void *local_address;
    uint64_t remote_address;
    size_t size;
    struct mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext;
    void *cbdata;
} mca_btl_doorbell_deferred_get_t;

static bool defer_get(mca_btl_doorbell_module_t *main, struct mca_btl_base_module_t *btl,
                      struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                      uint64_t remote_address,
                      struct mca_btl_base_registration_handle_t *local_handle, size_t size,
                      mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    mca_btl_doorbell_deferred_get_t *g = malloc(sizeof(*g));

    if (OPAL_UNLIKELY(NULL == g)) {
        return false; /* read it now */
    }
    *g = (mca_btl_doorbell_deferred_get_t){.btl = btl, .endpoint = endpoint,
                                           .local_address = local_address,
                                           .remote_address = remote_address, .size = size,
                                           .local_handle = local_handle, .cbfunc = cbfunc,
                                           .cbcontext = cbcontext, .cbdata = cbdata};
    OPAL_THREAD_LOCK(&main->deferred_lock);
    *main->deferred_tail = g;
    main->deferred_tail = &g->next;
    OPAL_THREAD_UNLOCK(&main->deferred_lock);
    /* after the queue: a pass that sees the count finds the get */
    OPAL_THREAD_ADD_FETCH32(&main->ndeferred, 1);
    return true;
}

int mca_btl_doorbell_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
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
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (endpoint->task == main->my_task) {
        /* this process's own memory (osc rdma's state across nodes) */
        memmove(local_address, (void *) (uintptr_t) remote_address, size);
        cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
        return OPAL_SUCCESS;
    }
    if (endpoint->module == &mca_btl_doorbell_tcp_module) {
        return tcp_get((mca_btl_doorbell_module_t *) btl, endpoint, local_address, remote_address,
                       local_handle, remote_handle, size, cbfunc, cbcontext, cbdata);
    }
    if (OPAL_UNLIKELY(!endpoint->cma)) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (size >= MCA_BTL_DOORBELL_DEFER_GET_MIN && !main->in_pass &&
        defer_get(main, btl, endpoint, local_address, remote_address, local_handle, size, cbfunc,
                  cbcontext, cbdata)) {
        return OPAL_SUCCESS;
    }
    if (OPAL_UNLIKELY(OPAL_SUCCESS != cma_get(main, endpoint, local_address, remote_address, size))) {
        return OPAL_ERROR;
    }
    /* the data is in place: complete now, as vader's CMA get does */
    cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
    return OPAL_SUCCESS;
}

int mca_btl_doorbell_deferred_gets_run(mca_btl_doorbell_module_t *module)
{
    mca_btl_doorbell_deferred_get_t *g;
    int n = 0;

    OPAL_THREAD_LOCK(&module->deferred_lock);
    g = module->deferred_head;
    module->deferred_head = NULL;
    module->deferred_tail = &module->deferred_head;
    OPAL_THREAD_UNLOCK(&module->deferred_lock);

    while (NULL != g) {
        mca_btl_doorbell_deferred_get_t *next = g->next;
        int rc = cma_get(module, g->endpoint, g->local_address, g->remote_address, g->size);

        OPAL_THREAD_ADD_FETCH32(&module->ndeferred, -1);
        g->cbfunc(g->btl, g->endpoint, g->local_address, g->local_handle, g->cbcontext, g->cbdata,
                  rc);
        free(g);
        g = next;
        ++n;
    }
    return n;
}
