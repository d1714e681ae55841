/* btl_doorbell_blocking.c -- which MPI calls may sleep.
 *
 * At Open MPI's idle point (btl_doorbell_idle.c) a wait loop and a program
 * that calls a non-waiting MPI function in a loop look the same: MPI_Test,
 * MPI_Iprobe and MPI_Win_flush on a window of MPI_COMM_SELF each run one
 * opal_progress() pass that finds nothing, back to back.  Sleeping in the
 * second case costs a whole sleep per call (measured: 20 ms per RMA epoch).
 *
 * So the component marks the calls that block.  It points the PLT slots
 * for MPI_Recv, MPI_Wait*, blocking collectives, RMA synchronisation, ...
 * of the program and of its other libraries (mpi4py, the Fortran bindings,
 * not Open MPI's own) at wrappers that count this thread's depth of
 * blocking calls and number each outermost call, then call the function
 * the slot would have reached.  The idle point sleeps only inside such a call, and only once
 * the same call has gone idle for its spin budget: a call that returns after
 * one idle pass (a flush with nothing to flush) never sleeps, and neither
 * does MPI_Test between compute chunks.
 *
 * A program whose MPI calls cannot be seen this way (linked statically, or
 * through dlsym) falls back to the timing rule: idle passes less than
 * MCA_BTL_DOORBELL_BACK_TO_BACK_NS apart form a wait.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <string.h>

#include "mpi.h"
#include "ompi/win/win.h"

#include "btl_doorbell_blocking.h"
#include "btl_doorbell_got.h"

static __thread unsigned int blocking_depth;
static __thread uint64_t blocking_serial;
static bool calls_marked;
static int slots_wrapped; /* the program's PLT slots the wrappers took */

static inline void enter(void)
{
    if (0 == blocking_depth++) {
        ++blocking_serial;
    }
}

static inline void leave(void)
{
    --blocking_depth;
}

/* X(name, parameters, arguments): the MPI calls that may wait. */
#define DOORBELL_BLOCKING_CALLS(X) \
    X(Send, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm), (buf, count, datatype, dest, tag, comm)) \
    X(Ssend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm), (buf, count, datatype, dest, tag, comm)) \
    X(Rsend, (const void *ibuf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm), (ibuf, count, datatype, dest, tag, comm)) \
    X(Recv, (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status), (buf, count, datatype, source, tag, comm, status)) \
    X(Sendrecv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status), (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status)) \
    X(Sendrecv_replace, (void * buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, MPI_Comm comm, MPI_Status *status), (buf, count, datatype, dest, sendtag, source, recvtag, comm, status)) \
    X(Probe, (int source, int tag, MPI_Comm comm, MPI_Status *status), (source, tag, comm, status)) \
    X(Mprobe, (int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status), (source, tag, comm, message, status)) \
    X(Mrecv, (void *buf, int count, MPI_Datatype type, MPI_Message *message, MPI_Status *status), (buf, count, type, message, status)) \
    X(Wait, (MPI_Request *request, MPI_Status *status), (request, status)) \
    X(Waitall, (int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses), (count, array_of_requests, array_of_statuses)) \
    X(Waitany, (int count, MPI_Request array_of_requests[], int *index, MPI_Status *status), (count, array_of_requests, index, status)) \
    X(Waitsome, (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], MPI_Status array_of_statuses[]), (incount, array_of_requests, outcount, array_of_indices, array_of_statuses)) \
    X(Barrier, (MPI_Comm comm), (comm)) \
    X(Bcast, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm), (buffer, count, datatype, root, comm)) \
    X(Reduce, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm), (sendbuf, recvbuf, count, datatype, op, root, comm)) \
    X(Allreduce, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm), (sendbuf, recvbuf, count, datatype, op, comm)) \
    X(Alltoall, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)) \
    X(Alltoallv, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)) \
    X(Alltoallw, (const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm), (sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)) \
    X(Allgather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)) \
    X(Allgatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)) \
    X(Gather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)) \
    X(Gatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)) \
    X(Scatter, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)) \
    X(Scatterv, (const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm), (sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)) \
    X(Reduce_scatter, (const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm), (sendbuf, recvbuf, recvcounts, datatype, op, comm)) \
    X(Reduce_scatter_block, (const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm), (sendbuf, recvbuf, recvcount, datatype, op, comm)) \
    X(Scan, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm), (sendbuf, recvbuf, count, datatype, op, comm)) \
    X(Exscan, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm), (sendbuf, recvbuf, count, datatype, op, comm)) \
    X(Neighbor_allgather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)) \
    X(Neighbor_allgatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)) \
    X(Neighbor_alltoall, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)) \
    X(Neighbor_alltoallv, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm), (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)) \
    X(Neighbor_alltoallw, (const void *sendbuf, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm), (sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)) \
    X(Comm_dup, (MPI_Comm comm, MPI_Comm *newcomm), (comm, newcomm)) \
    X(Comm_split, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm), (comm, color, key, newcomm)) \
    X(Comm_create, (MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm), (comm, group, newcomm)) \
    X(Win_create, (void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win *win), (base, size, disp_unit, info, comm, win)) \
    X(Win_allocate, (MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, MPI_Win *win), (size, disp_unit, info, comm, baseptr, win)) \
    X(Win_allocate_shared, (MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, MPI_Win *win), (size, disp_unit, info, comm, baseptr, win)) \
    X(Win_free, (MPI_Win *win), (win)) \
    X(File_open, (MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh), (comm, filename, amode, info, fh)) \
    X(File_close, (MPI_File *fh), (fh)) \
    X(File_read_all, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Status *status), (fh, buf, count, datatype, status)) \
    X(File_write_all, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status), (fh, buf, count, datatype, status)) \
    X(File_read_at_all, (MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype, MPI_Status *status), (fh, offset, buf, count, datatype, status)) \
    X(File_write_at_all, (MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status), (fh, offset, buf, count, datatype, status)) \
    X(File_sync, (MPI_File fh), (fh))

/* X(name, parameters, arguments): RMA synchronisation; each has a `win`. */
#define DOORBELL_RMA_CALLS(X) \
    X(Win_fence, (int assert, MPI_Win win), (assert, win)) \
    X(Win_complete, (MPI_Win win), (win)) \
    X(Win_wait, (MPI_Win win), (win)) \
    X(Win_start, (MPI_Group group, int assert, MPI_Win win), (group, assert, win)) \
    X(Win_lock, (int lock_type, int rank, int assert, MPI_Win win), (lock_type, rank, assert, win)) \
    X(Win_unlock, (int rank, MPI_Win win), (rank, win)) \
    X(Win_lock_all, (int assert, MPI_Win win), (assert, win)) \
    X(Win_unlock_all, (MPI_Win win), (win)) \
    X(Win_flush, (int rank, MPI_Win win), (rank, win)) \
    X(Win_flush_all, (MPI_Win win), (win)) \
    X(Win_flush_local, (int rank, MPI_Win win), (rank, win)) \
    X(Win_flush_local_all, (MPI_Win win), (win))

/* One wrapper: mark the call blocking while `blocks` holds, then call the
 * function the slot would have reached. */
#define DEFINE_WRAPPER(prefix, name, params, args, blocks) \
    static int(*real_##prefix##name) params;               \
    static int wrap_##prefix##name params                  \
    {                                                      \
        bool b = (blocks);                                 \
        if (b) {                                           \
            enter();                                       \
        }                                                  \
        int rc = real_##prefix##name args;                 \
        if (b) {                                           \
            leave();                                       \
        }                                                  \
        return rc;                                         \
    }

/* Two wrappers per call: one for the MPI_ name, which calls what that name
 * resolves to (a PMPI tool's MPI_Recv, if one is loaded, else Open MPI's),
 * and one for the PMPI_ name (the Fortran bindings and PMPI tools call it),
 * which calls Open MPI's.  Both count as one blocking call when nested. */
#define DEFINE_WRAPPERS(name, params, args)             \
    DEFINE_WRAPPER(MPI_, name, params, args, true)      \
    DEFINE_WRAPPER(PMPI_, name, params, args, true)
DOORBELL_BLOCKING_CALLS(DEFINE_WRAPPERS)

/* RMA synchronisation blocks only on a window whose one-sided component
 * moves its synchronisation as messages (osc pt2pt, over the BTLs: a
 * doorbell wakes the waiter).  osc sm posts, completes and unlocks by
 * storing flags in shared memory, which ring no doorbell: a sleeper there
 * would wait for its timeout (a whole sleep per PSCW epoch), so such a call spins
 * like MPI_Test (and yields when Open MPI asks). */
__attribute__((noinline, cold)) static bool osc_sends_messages(const void *fn)
{
    Dl_info info;
    return 0 != dladdr(fn, &info) && NULL != info.dli_fname &&
           NULL != strstr(info.dli_fname, "mca_osc_pt2pt");
}

/* The answer depends only on the module's component, which its fence
 * function names, so the last fence of each kind is remembered: one load
 * and a compare on the RMA calls of a program (the lock/flush/unlock loop
 * over osc sm ran 10% of its samples in a per-thread table before).  The
 * two slots are a cache of a pure function of the pointer, so relaxed
 * loads and stores are enough: a stale or raced slot only costs a dladdr. */
static const void *fence_sends; /* osc pt2pt's */
static const void *fence_quiet; /* any other component's (sm, rdma, ...) */

static inline bool win_may_sleep(MPI_Win win)
{
    const ompi_win_t *w = (const ompi_win_t *) win;

    if (NULL == w || NULL == w->w_osc_module) { /* MPI_WIN_NULL has no module */
        return false;
    }
    const void *fence = (const void *) w->w_osc_module->osc_fence;
    if (fence == __atomic_load_n(&fence_quiet, __ATOMIC_RELAXED)) {
        return false;
    }
    if (fence == __atomic_load_n(&fence_sends, __ATOMIC_RELAXED)) {
        return true;
    }
    bool sends = osc_sends_messages(fence);
    __atomic_store_n(sends ? &fence_sends : &fence_quiet, fence, __ATOMIC_RELAXED);
    return sends;
}

#define DEFINE_RMA_WRAPPERS(name, params, args)                   \
    DEFINE_WRAPPER(MPI_, name, params, args, win_may_sleep(win))  \
    DEFINE_WRAPPER(PMPI_, name, params, args, win_may_sleep(win))
DOORBELL_RMA_CALLS(DEFINE_RMA_WRAPPERS)

typedef struct {
    const char *name;
    void **real;
    void *wrapper;
} blocking_call_t;

#define TABLE_ENTRIES(name, params, args)                                          \
    {"MPI_" #name, (void **) &real_MPI_##name, (void *) wrap_MPI_##name},          \
    {"PMPI_" #name, (void **) &real_PMPI_##name, (void *) wrap_PMPI_##name},
static const blocking_call_t blocking_calls[] = {DOORBELL_BLOCKING_CALLS(TABLE_ENTRIES)
                                                     DOORBELL_RMA_CALLS(TABLE_ENTRIES)};

/* The program ("" in the link map) and its libraries, not Open MPI's own (whose internal calls
 * never go through the MPI_ names) and not this component. */
static bool is_caller_of_mpi(const char *path)
{
    return NULL == strstr(path, "libmpi.so") && NULL == strstr(path, "libopen-pal.so") &&
           NULL == strstr(path, "libopen-rte.so") && NULL == strstr(path, "/mca_") &&
           NULL == strstr(path, "/libc.so") && NULL == strstr(path, "/ld-linux");
}

bool mca_btl_doorbell_blocking_install(void)
{
    enum { NCALLS = sizeof(blocking_calls) / sizeof(blocking_calls[0]) };
    mca_btl_doorbell_got_target_t targets[NCALLS];
    size_t n = 0;

    for (size_t i = 0; i < NCALLS; ++i) {
        const blocking_call_t *b = &blocking_calls[i];
        /* what a call through the program's slot would reach; the slots
         * are changed only after the real target is known */
        void *impl = dlsym(RTLD_DEFAULT, b->name);
        if (NULL == impl || impl == b->wrapper) {
            continue;
        }
        *b->real = impl;
        targets[n++] = (mca_btl_doorbell_got_target_t){.symbol = b->name, .target = b->wrapper};
    }
    /* every slot in one walk over the loaded objects */
    slots_wrapped = mca_btl_doorbell_got_redirect_all(targets, n, is_caller_of_mpi);
    calls_marked = slots_wrapped > 0;
    return calls_marked;
}

int mca_btl_doorbell_blocking_slots(void)
{
    return slots_wrapped;
}

bool mca_btl_doorbell_blocking_marked(void)
{
    return calls_marked;
}

void mca_btl_doorbell_blocking_state(unsigned int *depth, uint64_t *serial)
{
    *depth = blocking_depth;
    *serial = blocking_serial;
}
