/* btl_doorbell.h -- Open MPI 4.1 BTL "doorbell": component and module.
 *
 * The BTL is thin glue: every byte moves through the doorbell core
 * (include/doorbell.h).  The glue owns only what Open MPI's structures need:
 * descriptors, free lists, parameters, and the "when may this rank sleep"
 * heuristic in the progress function.
 */
#ifndef MCA_BTL_DOORBELL_H
#define MCA_BTL_DOORBELL_H

#include "opal_config.h"

#include "opal/class/opal_free_list.h"
#include "opal/class/opal_list.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/btl/base/base.h"
#include "opal/threads/mutex.h"
#include "opal/util/output.h"
#include "opal/util/show_help.h"

#include "doorbell.h"

BEGIN_C_DECLS

/* All traffic uses window 0, which doorbell_endpoint_create opens. */
#define MCA_BTL_DOORBELL_WINDOW 0

/* doorbell_peer_path's answers: a peer over shared memory or over TCP. */
#define MCA_BTL_DOORBELL_PATH_SHM DOORBELL_PATH_SHM
#define MCA_BTL_DOORBELL_PATH_TCP DOORBELL_PATH_TCP

/* Progress calls closer together than this are a wait loop (MPI_Wait,
 * MPI_Recv, a tight MPI_Test loop); farther apart, the caller computes
 * between calls and must never be held up. */
#define MCA_BTL_DOORBELL_BACK_TO_BACK_NS 10000ull
/* A sleep that ran out is judged a stall only when work showed within this
 * long of its end: a rank preempted in between (a loaded machine) cannot
 * tell work that came during the sleep from work that came after it. */
#define MCA_BTL_DOORBELL_STALL_PROMPT_NS 100000ull
/* First sleep of a wait, in microseconds; later idle sleeps double up to sleep_max_us. */
#define MCA_BTL_DOORBELL_FIRST_SLEEP_US 1000u

typedef struct mca_btl_doorbell_component_t {
    mca_btl_base_component_3_0_0_t super;

    /* ---- parameters (see btl_doorbell_component.c for help texts) ---- */
    int wait_mode;              /* DOORBELL_WAIT_POLL/BLOCK/ADAPTIVE */
    unsigned int spin_us;       /* adaptive: idle time before sleeping */
    unsigned int sleep_max_us;  /* upper bound of one sleep */
    unsigned int sleep_poll_us; /* ... while something needs progress calls no bell announces */
    unsigned int ring_size;     /* inbound queue bytes, 0 -> core default */
    char *shm_dir;              /* NULL/"": env DOORBELL_SHM_DIR, else /dev/shm */
    char *if_include;
    char *if_exclude;
    int port_min;
    int port_range;
    bool force_tcp;
    bool single_copy;           /* offer btl_get (process_vm_readv) to same-node peers */
    /* limits of the TCP module (the shm module's are the standard
     * btl_doorbell_eager_limit, ... of mca_btl_base_param_register) */
    size_t tcp_eager_limit;
    size_t tcp_rndv_eager_limit;
    size_t tcp_max_send_size;
    size_t tcp_min_rget_size;   /* smaller messages to TCP peers skip RGET */
    int verbose;
    int free_list_num;
    int free_list_max;
    int free_list_inc;

    /* a parameter was rejected at registration: disqualify at init */
    bool param_error;
    char *bad_param_name;

    /* ---- runtime ---- */
    int output;                 /* opal_output stream, verbosity = verbose */
    bool help_file_found;       /* else fall back to plain opal_output */
    struct mca_btl_doorbell_module_t *module;   /* NULL until init succeeds */
    /* no room in the shared-memory directory: this rank's core runs
     * without shared memory, every pair of it goes over TCP */
    bool no_room;
    int roomless_peers;         /* same-node peers with no room, seen by add_procs */
    bool room_told;             /* the node's one warning about them is out */
} mca_btl_doorbell_component_t;

OPAL_MODULE_DECLSPEC extern mca_btl_doorbell_component_t mca_btl_doorbell_component;

/* The component offers two modules over one core, as Open MPI pairs
 * vader with tcp: the shm module reaches same-node peers (small eager
 * limit, single-copy GET for larger messages), the TCP module the others
 * (a large eager limit: no round trip before a message of up to 64 KiB).
 * ob1 reads a module's limits and flags for every send, so each path gets
 * the protocol that suits it.  The TCP module differs only in its limits,
 * flags and fragment lists: everything else (the core, peers, pending and
 * completed sends, progress and idle state) lives in the shm module, its
 * `main`. */
typedef struct mca_btl_doorbell_module_t {
    mca_btl_base_module_t super;
    struct mca_btl_doorbell_module_t *main;   /* holder of the shared state */

    doorbell_endpoint *core;
    uint32_t my_task;
    mca_btl_base_module_error_cb_fn_t error_cb;

    /* descriptors: eager (<= eager/rndv limit) and max (<= max_send_size) */
    opal_free_list_t eager_frags;
    opal_free_list_t max_frags;
    size_t eager_frag_size;
    size_t max_frag_size;

    /* endpoints by core peer id (a vpid of this job; from DOORBELL_MAX_TASKS
     * up, another job's proc); they live until finalize so the verbose
     * report can still name every peer's path after del_procs */
    opal_mutex_t lock;
    struct mca_btl_base_endpoint_t **peers;
    uint32_t npeers_alloc;

    /* sent descriptors whose owner asked for a callback: run from progress,
     * never from inside btl_send (ob1 is not re-entrant there) */
    opal_mutex_t completed_lock;
    opal_list_t completed;
    volatile int32_t ncompleted;

    /* endpoints holding sends the core refused with WOULD_BLOCK; one lock
     * for all of them (the path is rare, and one lock cannot deadlock) */
    opal_mutex_t pending_lock;
    opal_list_t pending_endpoints;
    volatile int32_t npending;

    /* ---- progress / sleep state (hooks/btl_doorbell_idle.c) ---- */
    volatile int32_t progress_busy;   /* one progress (or sleep) at a time */
    volatile int32_t send_activity;   /* set by senders, consumed by progress */
    uint64_t progress_calls;          /* our progress callback's calls */
    uint64_t idle_mark;               /* progress_calls at the last idle point */
    uint64_t last_idle_ns;            /* time of the last idle point */
    uint64_t run_serial;              /* the blocking MPI call this run belongs to */
    uint64_t run_passes;              /* idle passes of this run (paces clock reads) */
    uint64_t idle_since_ns;           /* start of this idle run; 0: not idle */
    uint64_t spin_ns;                 /* this idle run's spin before sleeping (doorbell_spin_begin) */
    uint32_t spin_lesson;             /* how the last run ended, not yet told to the core's
                                       * learner: DOORBELL_SPIN_ENDED_*, 0 none */
    uint32_t spin_lesson_flags;       /* DOORBELL_SPIN_YIELDS or 0 */
    uint64_t spin_lesson_ns;          /* its time from start to end */
    bool sleep_checked;               /* other BTLs inspected */
    bool sleep_allowed;               /* false if another BTL needs our progress loop */
    bool finalizing;
    unsigned int idle_sleeps;         /* consecutive idle sleeps: the next is 2^n times longer */
    unsigned int paths_seen;          /* bit PATH_SHM: a shm peer, bit PATH_TCP: a tcp peer */

    /* glue-side counters for the verbose report */
    uint64_t sleeps;
    uint64_t sleep_timeouts;
    uint64_t polled_sleeps;           /* sleeps bounded by sleep_poll_us */
    uint64_t stalls;                  /* sleeps that ran out with the wait's work already there */
    bool ran_out;                     /* the last sleep ran out unrung; see after_ran_out */
    uint64_t ran_out_ns;              /* ... at this time */
    uint64_t sends_queued;
    uint64_t single_copy_reads;       /* btl_get calls served by process_vm_readv */
    uint64_t tcp_reads;               /* btl_get calls served over TCP (the core's read) */
    uint64_t single_copy_writes;      /* btl_put calls served by process_vm_writev */
    uint64_t rma_ops;                 /* put, get and atomics of osc rdma over TCP (RMA channels) */
    uint64_t shm_atomics;             /* atomics sent to a same-node target */
    uint64_t atomics_served;          /* atomics run here for a same-node initiator */
    volatile int32_t nreads;          /* TCP reads and RMA ops not yet ended (polled in progress) */

    /* large same-node gets asked for outside a pass, read by the next pass
     * (btl_doorbell_get.c) */
    opal_mutex_t deferred_lock;
    struct mca_btl_doorbell_deferred_get_t *deferred_head;
    struct mca_btl_doorbell_deferred_get_t **deferred_tail;
    volatile int32_t ndeferred;
    volatile int32_t in_pass;         /* a pass of ours runs callbacks: gets go at once */
} mca_btl_doorbell_module_t;

extern mca_btl_doorbell_module_t mca_btl_doorbell_module;      /* shm, and the shared state */
extern mca_btl_doorbell_module_t mca_btl_doorbell_tcp_module;  /* peers on other nodes */

/* ---- module functions (btl_doorbell_module.c) ---- */
int mca_btl_doorbell_module_init(mca_btl_doorbell_module_t *module, doorbell_endpoint *core,
                                 uint32_t my_task, mca_btl_doorbell_module_t *main);
int mca_btl_doorbell_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                               struct opal_proc_t **procs,
                               struct mca_btl_base_endpoint_t **endpoints,
                               struct opal_bitmap_t *reachable);
int mca_btl_doorbell_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                               struct opal_proc_t **procs,
                               struct mca_btl_base_endpoint_t **endpoints);
int mca_btl_doorbell_finalize(struct mca_btl_base_module_t *btl);
mca_btl_base_descriptor_t *mca_btl_doorbell_alloc(struct mca_btl_base_module_t *btl,
                                                  struct mca_btl_base_endpoint_t *endpoint,
                                                  uint8_t order, size_t size, uint32_t flags);
int mca_btl_doorbell_free(struct mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des);
mca_btl_base_descriptor_t *mca_btl_doorbell_prepare_src(struct mca_btl_base_module_t *btl,
                                                        struct mca_btl_base_endpoint_t *endpoint,
                                                        struct opal_convertor_t *convertor,
                                                        uint8_t order, size_t reserve,
                                                        size_t *size, uint32_t flags);

/* ---- sending (btl_doorbell_send.c) ---- */
int mca_btl_doorbell_send(struct mca_btl_base_module_t *btl,
                          struct mca_btl_base_endpoint_t *endpoint,
                          struct mca_btl_base_descriptor_t *descriptor, mca_btl_base_tag_t tag);
int mca_btl_doorbell_sendi(struct mca_btl_base_module_t *btl,
                           struct mca_btl_base_endpoint_t *endpoint,
                           struct opal_convertor_t *convertor, void *header, size_t header_size,
                           size_t payload_size, uint8_t order, uint32_t flags,
                           mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor);

/* Called from progress: run deferred completions and retry refused sends. */
int mca_btl_doorbell_drain_completed(mca_btl_doorbell_module_t *module);
int mca_btl_doorbell_retry_pending(mca_btl_doorbell_module_t *module);

/* The core's receive callback: hands (data, len) to ob1 for `tag`. */
void mca_btl_doorbell_recv_cb(void *ctx, uint32_t task, uint32_t window, uint8_t tag,
                              const uint8_t *data, size_t len);

/* A peer's process is gone (core reported PEER_LOST for `task`). */
void mca_btl_doorbell_peer_lost(mca_btl_doorbell_module_t *module, uint32_t task);

/* Shared memory between this rank and `task` broke its format: the core
 * returned `rc`, a DOORBELL_ERR_CORRUPT_* naming the structure. */
void mca_btl_doorbell_peer_corrupt(mca_btl_doorbell_module_t *module, uint32_t task, int rc);

/* Is `rc` one of the core's DOORBELL_ERR_CORRUPT_* codes? */
static inline bool mca_btl_doorbell_is_corrupt(int rc)
{
    return DOORBELL_ERR_CORRUPT_QUEUE_HEADER == rc || DOORBELL_ERR_CORRUPT_FAST_BOX == rc ||
           DOORBELL_ERR_CORRUPT_RECORD == rc;
}

/* ---- single-copy reads (btl_doorbell_get.c) ---- */

/* What every rank publishes in the modex before the core's address. */
typedef struct {
    uint64_t pid;
    uint64_t probe_address;     /* &mca_btl_doorbell_cma_probe_word */
    uint32_t flags;             /* MCA_BTL_DOORBELL_MODEX_* */
    uint32_t pad;
} mca_btl_doorbell_modex_head_t;

/* The rank found no room for its shared memory: its pairs go over TCP. */
#define MCA_BTL_DOORBELL_MODEX_NO_ROOM 1u

extern const uint64_t mca_btl_doorbell_cma_probe_word;
/* true if this process can read the peer's memory */
bool mca_btl_doorbell_cma_probe(pid_t pid, uint64_t probe_address);
/* Registration (btl_doorbell_get.c).  Over shared memory nothing is
 * registered (single copy and atomics use addresses).  Over TCP, ob1
 * registers a buffer it sends by RGET to one peer: the core exposes that
 * range to that peer only, for reads over the message connection
 * (doorbell_read).  osc rdma registers a window for every peer
 * (MCA_BTL_ENDPOINT_ANY): the core exposes it to the job's tasks over RMA
 * channels (doorbell_expose_rma), served by the target's event thread. */
struct mca_btl_base_registration_handle_t {
    uint64_t key; /* 0: a local buffer, nothing exposed */
    uint32_t rma; /* 1: key is an RMA exposure (doorbell_rma_*) */
    uint32_t pad;
};
mca_btl_base_registration_handle_t *mca_btl_doorbell_register_mem(struct mca_btl_base_module_t *btl,
                                                                  struct mca_btl_base_endpoint_t *endpoint,
                                                                  void *base, size_t size, uint32_t flags);
int mca_btl_doorbell_deregister_mem(struct mca_btl_base_module_t *btl,
                                    mca_btl_base_registration_handle_t *handle);
/* Complete the TCP reads and RMA operations that ended; returns how many. */
int mca_btl_doorbell_reads_progress(mca_btl_doorbell_module_t *module);

/* An RDMA operation in flight over TCP (a read, an RMA op) or an atomic
 * waiting for a same-node target's answer: what ob1's or osc rdma's
 * completion callback needs.  A TCP get larger than one core op is split:
 * `parts` core ops, the callback once the last ends. */
typedef struct mca_btl_doorbell_rdma_op_t {
    struct mca_btl_base_module_t *btl;
    struct mca_btl_base_endpoint_t *endpoint;
    void *local_address;
    struct mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext;
    void *cbdata;
    volatile int32_t parts;
    volatile int32_t status;
    /* same-node atomics (btl_doorbell_rdma.c) */
    uint64_t id;
    uint32_t width;
    uint32_t task;
} mca_btl_doorbell_rdma_op_t;

/* One part of `op` ended with `status` (OPAL_*); after the last, the
 * callback runs (with the first failure, if any) and `op` is freed. */
void mca_btl_doorbell_rdma_op_end(mca_btl_doorbell_module_t *module, mca_btl_doorbell_rdma_op_t *op,
                                  int status);
int mca_btl_doorbell_status_to_opal(int rc);

int mca_btl_doorbell_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                         void *local_address, uint64_t remote_address,
                         struct mca_btl_base_registration_handle_t *local_handle,
                         struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                         int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                         void *cbcontext, void *cbdata);
/* Read the gets deferred since the last pass and run their callbacks;
 * the number read.  From a pass, with progress_busy held. */
int mca_btl_doorbell_deferred_gets_run(mca_btl_doorbell_module_t *module);
/* process_vm_readv/writev of a same-node peer; OPAL_SUCCESS or OPAL_ERROR */
int mca_btl_doorbell_cma(pid_t pid, void *local, uint64_t remote, size_t size, bool write);

/* ---- put and atomics (btl_doorbell_rdma.c) ---- */

/* The core's largest RMA op over TCP (path/rma.rs RMA_MAX). */
#define MCA_BTL_DOORBELL_RMA_MAX (512 * 1024)
/* A same-node get of at least this many bytes asked for outside a pass
 * waits for the next pass (btl_doorbell_get.c says why); a smaller one
 * costs less than the queueing. */
#define MCA_BTL_DOORBELL_DEFER_GET_MIN (64 * 1024)
/* The BTL-private tag of same-node atomics and their answers. */
#define MCA_BTL_DOORBELL_TAG_ATOMIC (MCA_BTL_TAG_BTL + 12)

int mca_btl_doorbell_put(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                         void *local_address, uint64_t remote_address,
                         struct mca_btl_base_registration_handle_t *local_handle,
                         struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                         int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                         void *cbcontext, void *cbdata);
int mca_btl_doorbell_atomic_op(struct mca_btl_base_module_t *btl,
                               struct mca_btl_base_endpoint_t *endpoint, uint64_t remote_address,
                               struct mca_btl_base_registration_handle_t *remote_handle,
                               mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                               mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                               void *cbdata);
int mca_btl_doorbell_atomic_fop(struct mca_btl_base_module_t *btl,
                                struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                                uint64_t remote_address,
                                struct mca_btl_base_registration_handle_t *local_handle,
                                struct mca_btl_base_registration_handle_t *remote_handle,
                                mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                                mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                void *cbdata);
int mca_btl_doorbell_atomic_cswap(struct mca_btl_base_module_t *btl,
                                  struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                                  uint64_t remote_address,
                                  struct mca_btl_base_registration_handle_t *local_handle,
                                  struct mca_btl_base_registration_handle_t *remote_handle,
                                  uint64_t compare, uint64_t value, int flags, int order,
                                  mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                  void *cbdata);
/* The receive side of same-node atomics: a request (run it, answer) or an
 * answer (complete the op).  From the receive callback, for tag
 * MCA_BTL_DOORBELL_TAG_ATOMIC. */
void mca_btl_doorbell_atomic_recv(mca_btl_doorbell_module_t *module, uint32_t task,
                                  const uint8_t *data, size_t len);
/* The flags and limits of both modules' RDMA interface (component init). */
void mca_btl_doorbell_rdma_setup(mca_btl_base_module_t *shm, mca_btl_base_module_t *tcp);

/* ---- the idle point (hooks/btl_doorbell_idle.c) ---- */

/* Hook Open MPI's idle point (and request completions by other threads);
 * false if this Open MPI offers no such point (then the rank polls). */
bool mca_btl_doorbell_idle_install(void);
void mca_btl_doorbell_idle_uninstall(void);
/* Point libopen-pal's dlopen (which loads Open MPI's components) at the
 * hook that prepares each component loaded after this one: the idle
 * point's progress registrations and the osc rdma fix
 * (hooks/btl_doorbell_osc_fix.c).  Slots go back with idle_uninstall. */
void mca_btl_doorbell_dlopen_install(void);
/* From the progress callback: called each pass; `events` > 0 if it did work. */
void mca_btl_doorbell_idle_note_pass(mca_btl_doorbell_module_t *module, int events);
/* Module init: reset the sleep state. */
void mca_btl_doorbell_idle_reset(mca_btl_doorbell_module_t *module);
/* How the last run ended waits to be told to the core's learner until the
 * rank is idle again (off the way from the message to the MPI call's
 * return), or until anything else is delivered: the learner finds the
 * message's path from the receive counters, which must not have moved.
 * Call before every delivery and before reading the learner. */
void mca_btl_doorbell_idle_tell(mca_btl_doorbell_module_t *module);
static inline void mca_btl_doorbell_idle_teach(mca_btl_doorbell_module_t *module)
{
    if (OPAL_UNLIKELY(0 != module->spin_lesson)) {
        mca_btl_doorbell_idle_tell(module);
    }
}

/* ---- component helpers (btl_doorbell_component.c) ---- */

/* May this rank sleep at all?  Not if another BTL (not self) is active:
 * its traffic moves only while opal_progress spins. */
void mca_btl_doorbell_check_sleep_allowed(mca_btl_doorbell_module_t *module);
/* With the BTL list self,doorbell, let osc sm take MPI_Win_allocate
 * windows before osc rdma (component init; btl_doorbell_component.c says why). */
void mca_btl_doorbell_prefer_osc_sm(void);
/* A core error from progress or wait: a lost peer, or a report. */
void mca_btl_doorbell_core_error(mca_btl_doorbell_module_t *module, int rc, const doorbell_wake *wake);

/* Show a help topic from help-mpi-btl-doorbell.txt, rendered in this process
 * and written to stderr.  (Not opal_show_help: in Open MPI 4.1.4 an
 * application's help messages travel to mpirun through PMIx "log", and a
 * rank that aborts right afterwards loses them -- seen here as "ORTE_ERROR_LOG:
 * Data unpack would read past end of buffer in show_help.c".)  A problem of
 * the whole node (once_per_node) is printed by local rank 0 only.  If the help
 * file cannot be found, `fallback` -- a printf format taking the same
 * arguments -- is printed instead of Open MPI's "Sorry! You were supposed to
 * get help about...". */
void mca_btl_doorbell_show_help(bool once_per_node, const char *topic, const char *fallback, ...)
    __opal_attribute_format__(__printf__, 3, 4);

/* Wrappers for the OPAL_MODEX_* macros (they expand to a lot of code). */
int mca_btl_doorbell_modex_send(const void *blob, size_t len);
int mca_btl_doorbell_modex_recv(const struct opal_proc_t *proc, uint8_t **blob, size_t *len);

/* true once MPI_Finalize has begun: peers may then exit at any moment and
 * their departure is not an error */
bool mca_btl_doorbell_mpi_finalizing(void);
/* Local rank 0's one warning: `without` ranks of this node found no room
 * for their shared memory (their pairs go over TCP). */
void mca_btl_doorbell_tell_no_room(int without);

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no syscall) */
uint64_t mca_btl_doorbell_now_ns(void);

static inline const char *mca_btl_doorbell_path_name(int path)
{
    switch (path) {
    case 1: return "shm";
    case 2: return "tcp";
    default: return "unknown";
    }
}

END_C_DECLS

#endif /* MCA_BTL_DOORBELL_H */
