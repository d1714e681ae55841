/* btl_doorbell_component.c -- parameters, open/close, init, progress.
 *
 * The progress callback only polls: it delivers what arrived, runs
 * completions and retries queued sends.  Whether a rank sleeps is decided
 * at Open MPI's idle point, after every other progress source had its turn
 * (hooks/btl_doorbell_idle.c).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_var_enum.h"
#include "opal/mca/installdirs/installdirs.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"
#include "btl_doorbell_frag.h"
#include "btl_doorbell_blocking.h"
#include "btl_doorbell_osc_fix.h"

/* ompi_mpi_state lives in libmpi, which every process that opens BTLs has
 * loaded; weak so the component still loads without it (then we never
 * consider ourselves finalizing). */
#include "ompi/runtime/mpiruntime.h"
#pragma weak ompi_mpi_state

/* orte_ess lives in libopen-rte, likewise loaded; weak for the same
 * reason (then no abort is announced). */
#include "orte/mca/ess/ess.h"
#pragma weak orte_ess

#define HELP_FILE "help-mpi-btl-doorbell.txt"

static int doorbell_component_register(void);
static int doorbell_component_open(void);
static int doorbell_component_close(void);
static mca_btl_base_module_t **doorbell_component_init(int *num_btls, bool enable_progress_threads,
                                                       bool enable_mpi_threads);
static int doorbell_component_progress(void);

mca_btl_doorbell_component_t mca_btl_doorbell_component = {
    .super = {
        .btl_version = {
            MCA_BTL_DEFAULT_VERSION("doorbell"),
            .mca_open_component = doorbell_component_open,
            .mca_close_component = doorbell_component_close,
            .mca_register_component_params = doorbell_component_register,
        },
        .btl_data = {
            .param_field = MCA_BASE_METADATA_PARAM_NONE,
        },
        .btl_init = doorbell_component_init,
        .btl_progress = doorbell_component_progress,
    },
    .output = -1,
};

static const mca_base_var_enum_value_t wait_mode_values[] = {
    {.value = DOORBELL_WAIT_POLL, .string = "poll"},
    {.value = DOORBELL_WAIT_BLOCK, .string = "block"},
    {.value = DOORBELL_WAIT_ADAPTIVE, .string = "adaptive"},
    {.value = 0, .string = NULL},
};

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* Progress reads the time on every call (to tell a wait loop from compute
 * between MPI_Test calls); clock_gettime was 18% of a ping-pong's profile
 * here.  Where the TSC is invariant we scale it instead, calibrated against
 * the clock; the result only needs to be right to a few percent.
 *
 * The calibration needs two readings some milliseconds apart.  MPI_Init
 * does not wait for them (a 5 ms sleep there was a quarter of a 2-rank
 * job's start-up): calibrate_tsc takes the first, and the first call of
 * mca_btl_doorbell_now_ns at least TSC_CALIBRATION_NS later takes the
 * second; until then the time is the clock's.  Several threads may read
 * the time: one of them (the exchange on tsc_calibrating) computes the
 * scale, stores the base and then publishes the scale with a release
 * store; a reader that acquires a non-zero scale sees that base. */
#if defined(__x86_64__)
#include <x86intrin.h>
#define TSC_CALIBRATION_NS 5000000ull
static uint64_t tsc_scale_bits;  /* a double, ns per tick; 0: not calibrated */
static uint64_t tsc_base, tsc_base_ns;
static uint64_t tsc_first, tsc_first_ns;
static bool tsc_calibrating;     /* the first reading is taken, the second not yet */

static void calibrate_tsc(void)
{
    char line[4096];
    bool invariant = false;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        if (0 == strncmp(line, "flags", 5)) {
            invariant = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
            break;
        }
    }
    if (f) {
        fclose(f);
    }
    if (!invariant || __atomic_load_n(&tsc_scale_bits, __ATOMIC_RELAXED) != 0) {
        return;
    }
    tsc_first_ns = clock_ns();
    tsc_first = __rdtsc();
    __atomic_store_n(&tsc_calibrating, true, __ATOMIC_RELEASE);
}

/* The second reading, once enough time has passed: by one thread only. */
static void finish_calibration(uint64_t n1)
{
    if (!__atomic_exchange_n(&tsc_calibrating, false, __ATOMIC_ACQUIRE)) {
        return; /* another thread does it */
    }
    uint64_t t1 = __rdtsc();
    if (t1 <= tsc_first || n1 <= tsc_first_ns) {
        return; /* the clock's time from now on */
    }
    double scale = (double) (n1 - tsc_first_ns) / (double) (t1 - tsc_first);
    uint64_t bits;
    memcpy(&bits, &scale, sizeof(bits));
    tsc_base = t1;
    tsc_base_ns = n1;
    __atomic_store_n(&tsc_scale_bits, bits, __ATOMIC_RELEASE);
}

uint64_t mca_btl_doorbell_now_ns(void)
{
    uint64_t bits = __atomic_load_n(&tsc_scale_bits, __ATOMIC_ACQUIRE);
    if (OPAL_LIKELY(0 != bits)) {
        double scale;
        memcpy(&scale, &bits, sizeof(scale));
        return tsc_base_ns + (uint64_t) ((double) (__rdtsc() - tsc_base) * scale);
    }
    uint64_t n = clock_ns();
    if (__atomic_load_n(&tsc_calibrating, __ATOMIC_ACQUIRE) && n - tsc_first_ns >= TSC_CALIBRATION_NS) {
        finish_calibration(n);
    }
    return n;
}
#else
static void calibrate_tsc(void) {}

uint64_t mca_btl_doorbell_now_ns(void)
{
    return clock_ns();
}
#endif

bool mca_btl_doorbell_mpi_finalizing(void)
{
    return &ompi_mpi_state != NULL && ompi_mpi_state >= OMPI_MPI_STATE_FINALIZE_STARTED;
}

void mca_btl_doorbell_show_help(bool once_per_node, const char *topic, const char *fallback, ...)
{
    const char *host = opal_process_info.nodename ? opal_process_info.nodename : "?";
    char *msg = NULL;
    va_list ap;

    if (once_per_node && opal_process_info.my_local_rank > 0) {
        return;
    }
    va_start(ap, fallback);
    if (mca_btl_doorbell_component.help_file_found) {
        msg = opal_show_help_vstring(HELP_FILE, topic, 1, ap);
    }
    va_end(ap);
    if (NULL != msg) {
        fprintf(stderr, "%s", msg);
    } else {
        va_start(ap, fallback);
        if (vasprintf(&msg, fallback, ap) < 0) {
            msg = NULL;
        }
        va_end(ap);
        fprintf(stderr, "btl doorbell (%s) on %s: %s\n", topic, host, msg ? msg : topic);
    }
    fflush(stderr);
    free(msg);
}

int mca_btl_doorbell_modex_send(const void *blob, size_t len)
{
    int rc;
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &mca_btl_doorbell_component.super.btl_version,
                    blob, len);
    return rc;
}

int mca_btl_doorbell_modex_recv(const struct opal_proc_t *proc, uint8_t **blob, size_t *len)
{
    int rc;
    OPAL_MODEX_RECV(rc, &mca_btl_doorbell_component.super.btl_version, &proc->proc_name,
                    (void **) blob, len);
    return rc;
}

/* FNV-1a: tasks with the same node name get the same node_id, which is the
 * core's rule for "talk over shared memory". */
static uint64_t node_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *) name; p && *p; ++p) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv1a_more(uint64_t h, const void *bytes, size_t len)
{
    for (const unsigned char *p = bytes; len--; ++p) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The job key: Open MPI's own identity of the job -- the uid, the jobid
 * (readable in the file names, for people and test scripts), and a 48-bit
 * hash of the jobid, the PMIx namespace and the random per-job key mpirun
 * hands every rank for transports to tell jobs apart by
 * (orte_precondition_transports).  Every rank of the job computes the
 * same, at most 39 characters.  The key only labels the job's files: jobs
 * Open MPI itself cannot tell apart (two pid namespaces sharing /dev/shm
 * and a hostname give the same jobid) still never share one, because the
 * core names a rank's files after a random token of its own and makes
 * them with O_EXCL. */
static void job_key(char *out, size_t len, opal_jobid_t jobid)
{
    const char *parts[] = {getenv("PMIX_NAMESPACE"), getenv("OMPI_MCA_orte_precondition_transports")};
    uint64_t h = fnv1a_more(0xcbf29ce484222325ull, &jobid, sizeof(jobid));

    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); ++i) {
        const char *p = parts[i] ? parts[i] : "";
        h = fnv1a_more(h, p, strlen(p) + 1);
    }
    snprintf(out, len, "ompi.u%u.j%08x.%012llx", (unsigned) getuid(), (unsigned) jobid,
             (unsigned long long) (h >> 16));
}

/* Look for the help file next to this .so (make install puts it there),
 * then in Open MPI's own data directory. */
static void find_help_file(void)
{
    Dl_info info;
    char path[4096];

    mca_btl_doorbell_component.help_file_found = false;

    if (dladdr((void *) &mca_btl_doorbell_component, &info) && NULL != info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (NULL != slash) {
            int dirlen = (int) (slash - info.dli_fname);
            snprintf(path, sizeof(path), "%.*s/%s", dirlen, info.dli_fname, HELP_FILE);
            if (0 == access(path, R_OK)) {
                char *dir = strndup(info.dli_fname, (size_t) dirlen);
                if (NULL != dir) {
                    /* show_help keeps its own copy of the directory list */
                    opal_show_help_add_dir(dir);
                    free(dir);
                    mca_btl_doorbell_component.help_file_found = true;
                    return;
                }
            }
        }
    }

    if (NULL != opal_install_dirs.opaldatadir) {
        snprintf(path, sizeof(path), "%s/%s", opal_install_dirs.opaldatadir, HELP_FILE);
        if (0 == access(path, R_OK)) {
            mca_btl_doorbell_component.help_file_found = true;
        }
    }
}

/* ------------------------------------------------------------------ */
/* parameters                                                          */

static void note_param_error(int rc, const char *name)
{
    if (rc < 0 && !mca_btl_doorbell_component.param_error) {
        mca_btl_doorbell_component.param_error = true;
        free(mca_btl_doorbell_component.bad_param_name);
        mca_btl_doorbell_component.bad_param_name = strdup(name);
    }
}

/* Register btl_doorbell_<name>; a failure is noted under that full name.
 * The typed wrappers keep each parameter's storage type checked. */
static void reg_var(const char *name, const char *help, mca_base_var_type_t type, void *storage,
                    mca_base_var_info_lvl_t lvl)
{
    char full[96];
    int rc = mca_base_component_var_register(&mca_btl_doorbell_component.super.btl_version, name,
                                             help, type, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, lvl,
                                             MCA_BASE_VAR_SCOPE_READONLY, storage);

    snprintf(full, sizeof(full), "btl_doorbell_%s", name);
    note_param_error(rc, full);
}

static void reg_uint(const char *name, const char *help, unsigned int *storage,
                     mca_base_var_info_lvl_t lvl)
{
    reg_var(name, help, MCA_BASE_VAR_TYPE_UNSIGNED_INT, storage, lvl);
}

static void reg_int(const char *name, const char *help, int *storage, mca_base_var_info_lvl_t lvl)
{
    reg_var(name, help, MCA_BASE_VAR_TYPE_INT, storage, lvl);
}

/* A size_t parameter with its default. */
static void param_size(const char *name, const char *help, size_t *storage, size_t value,
                       mca_base_var_info_lvl_t lvl)
{
    *storage = value;
    reg_var(name, help, MCA_BASE_VAR_TYPE_SIZE_T, storage, lvl);
}

static int doorbell_component_register(void)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    mca_btl_base_module_t *m = &mca_btl_doorbell_module.super;
    mca_base_var_enum_t *wait_enum = NULL;
    int rc;

    (void) mca_base_var_group_component_register(&c->super.btl_version,
                                                 "Doorbell transport: shared memory and TCP "
                                                 "with sleeping waits");

    c->param_error = false;

    c->wait_mode = DOORBELL_WAIT_ADAPTIVE;
    rc = mca_base_var_enum_create("btl_doorbell_wait_modes", wait_mode_values, &wait_enum);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    rc = mca_base_component_var_register(
        &c->super.btl_version, "wait_mode",
        "How a rank with nothing to do waits: "
        "poll (spin, never sleep: lowest latency, 100% CPU), "
        "block (sleep on the doorbell as soon as progress finds nothing), "
        "adaptive (spin up to btl_doorbell_spin_us, less where spinning has not paid "
        "lately, then sleep).  Whatever the mode, a rank sleeps only inside a blocking MPI "
        "call (MPI_Recv, MPI_Wait, collectives, RMA synchronisation) and only when all of "
        "Open MPI's progress found nothing to do; MPI_Test/MPI_Iprobe never sleep",
        MCA_BASE_VAR_TYPE_INT, wait_enum, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_READONLY, &c->wait_mode);
    OBJ_RELEASE(wait_enum);
    note_param_error(rc, "btl_doorbell_wait_mode");

    /* Longer than this VM's cross-CPU wake-up (~30-40 us), so a ping-pong
     * never settles into both sides sleeping (measured: 1000 keeps 2-rank
     * TCP latency at btl tcp's, 50 doubled it; barrier time unchanged). */
    c->spin_us = 1000;
    reg_uint("spin_us",
             "adaptive wait mode: longest spin, in microseconds, of a blocking call that finds "
             "nothing to do before it sleeps (shortened to 0 per path -- shm, tcp -- while "
             "messages keep arriving only after the spin; re-probed now and then)",
             &c->spin_us, OPAL_INFO_LVL_4);

    /* A rank idle in a blocking call wakes once a second at most: every
     * source of work it knows of rings its bell (docs/architecture.md,
     * "Where a rank sleeps"). */
    c->sleep_max_us = 1000000;
    reg_uint("sleep_max_us",
             "Longest single sleep in microseconds (must be >= 1).  A wait starts with "
             "1000 us sleeps and doubles them while they time out idle, up to this, or up "
             "to sleep_poll_us while some part of Open MPI needs progress calls that no "
             "message announces",
             &c->sleep_max_us, OPAL_INFO_LVL_4);

    c->sleep_poll_us = 16000;
    reg_uint("sleep_poll_us",
             "Longest single sleep in microseconds (must be >= 1) while a progress callback "
             "whose work rings no doorbell is registered with Open MPI (anything but the "
             "BTLs', libnbc's and osc pt2pt's: ob1's pending sends, communicator requests, "
             "MPI-IO, extended generalized requests, ...), or while opal's event base holds "
             "an event",
             &c->sleep_poll_us, OPAL_INFO_LVL_4);

    c->ring_size = 1 << 19;
    reg_uint("ring_size",
             "Bytes of payload in each rank's inbound shared-memory queue, which all "
             "same-node senders to the rank share: a power of 2 from 4096 to 1073741824 "
             "(0 = the core's default, 512 KiB).  A rank's shared memory is this plus "
             "about 121 KiB, whatever the number of ranks",
             &c->ring_size, OPAL_INFO_LVL_5);

    c->shm_dir = NULL;
    rc = mca_base_component_var_register(
        &c->super.btl_version, "shm_dir",
        "Directory (an absolute path, ideally a tmpfs) for the shared-memory segments: one "
        "control segment per rank holding its inbound queue (btl_doorbell_ring_size + "
        "123,520 bytes), reserved when the rank starts, and bulk buffers for messages over a "
        "quarter of the queue.  Empty: the DOORBELL_SHM_DIR environment variable, else "
        "/dev/shm.  A rank with no room for its control segment has no doorbell transport",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &c->shm_dir);
    note_param_error(rc, "btl_doorbell_shm_dir");

    c->if_include = NULL;
    rc = mca_base_component_var_register(
        &c->super.btl_version, "if_include",
        "Comma-separated list of interface names or CIDR subnets (e.g. eth0,10.0.0.0/8) "
        "the TCP path may use.  Mutually exclusive with btl_doorbell_if_exclude",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_1,
        MCA_BASE_VAR_SCOPE_READONLY, &c->if_include);
    note_param_error(rc, "btl_doorbell_if_include");

    c->if_exclude = NULL;
    rc = mca_base_component_var_register(
        &c->super.btl_version, "if_exclude",
        "Comma-separated list of interface names or CIDR subnets the TCP path must not "
        "use.  Mutually exclusive with btl_doorbell_if_include",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_1,
        MCA_BASE_VAR_SCOPE_READONLY, &c->if_exclude);
    note_param_error(rc, "btl_doorbell_if_exclude");

    c->port_min = 0;
    reg_int("port_min",
            "Lowest TCP port to listen on (0 = any ephemeral port, else 1..65535)",
            &c->port_min, OPAL_INFO_LVL_2);

    c->port_range = 0;
    reg_int("port_range",
            "Number of ports from btl_doorbell_port_min to try (0 = up to 65535)",
            &c->port_range, OPAL_INFO_LVL_2);

    c->force_tcp = false;
    rc = mca_base_component_var_register(
        &c->super.btl_version, "force_tcp",
        "Use TCP even for peers on the same node (testing, or when /dev/shm is unusable)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_READONLY, &c->force_tcp);
    note_param_error(rc, "btl_doorbell_force_tcp");

    c->single_copy = true;
    rc = mca_base_component_var_register(
        &c->super.btl_version, "single_copy",
        "Large messages in one copy (ob1's RGET): the receiver reads the sender's buffer, with "
        "process_vm_readv from a same-node peer (as vader's CMA does; when the peer's memory "
        "cannot be read, they go through the ring), over the TCP connection straight into "
        "its buffer from a peer on another node.  Off, they take two copies.  Also the put, "
        "get and atomics osc rdma needs (MPI_Win_create with the default osc list)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_READONLY, &c->single_copy);
    note_param_error(rc, "btl_doorbell_single_copy");

    c->verbose = 0;
    reg_int("verbose",
            "Verbosity: >= 1 prints, at finalize, this rank's doorbell counters and the "
            "path (shm or tcp) used to reach each peer; >= 10 traces setup",
            &c->verbose, OPAL_INFO_LVL_9);

    c->free_list_num = 16;
    reg_int("free_list_num", "Initial number of send descriptors per size class",
            &c->free_list_num, OPAL_INFO_LVL_9);
    c->free_list_max = 4096;
    reg_int("free_list_max",
            "Maximum number of send descriptors per size class (-1 = unlimited)",
            &c->free_list_max, OPAL_INFO_LVL_9);
    c->free_list_inc = 32;
    reg_int("free_list_inc", "Number of send descriptors added when a list grows",
            &c->free_list_inc, OPAL_INFO_LVL_9);

    /* The TCP module's limits (see btl_doorbell.h for the two modules).
     * Over TCP there is no single copy, and a rendezvous costs a network
     * round trip: a large eager limit, as btl tcp has (64 KiB, 128 KiB). */
    param_size("tcp_eager_limit",
               "Eager limit (bytes) towards peers reached over TCP (other nodes, or every "
               "peer with btl_doorbell_force_tcp); btl_doorbell_eager_limit is the one of "
               "same-node peers",
               &c->tcp_eager_limit, 64 * 1024, OPAL_INFO_LVL_5);
    param_size("tcp_rndv_eager_limit",
               "Bytes sent with a rendezvous request towards peers reached over TCP",
               &c->tcp_rndv_eager_limit, 64 * 1024, OPAL_INFO_LVL_5);
    param_size("tcp_max_send_size", "Largest fragment (bytes) sent to a peer reached over TCP",
               &c->tcp_max_send_size, 128 * 1024, OPAL_INFO_LVL_5);
    param_size("tcp_min_rget_size",
               "Smallest message (bytes) sent to a peer reached over TCP by RGET (the "
               "receiver reads it straight into its buffer, after a request round trip); "
               "smaller ones above the eager limit go by rendezvous and fragments (0: RGET "
               "from the eager limit on)",
               &c->tcp_min_rget_size, 0, OPAL_INFO_LVL_5);

    /* Standard BTL parameters (btl_doorbell_eager_limit, ...): the shm
     * module's.  Above the eager limit ob1 sends a contiguous message by
     * RGET: the receiver reads it from the sender's memory in one copy
     * (btl_doorbell_get.c), where an eager message costs a copy on each
     * side.  OSU latency, 2 ranks, same run: eager 4 KiB against 64 KiB
     * took 8 KiB from 1.87 to 1.25 us, 16 KiB 3.25 -> 1.61, 32 KiB 5.63 ->
     * 2.16 (vader, also 4 KiB: 1.43, 1.63, 2.43).  Without single copy the
     * init raises the defaults to the TCP module's (a rendezvous then
     * costs a round trip and two copies).  max_send 128 KiB beat 32 KiB
     * and 512 KiB from 1 MiB up for non-contiguous data. */
    /* Lowest but one (the TCP module takes the lowest: btl_doorbell_rdma.c
     * says why): installing doorbell never displaces vader or tcp in jobs
     * that do not ask for it; `--mca btl self,doorbell` or LD_PRELOAD
     * selects it. */
    m->btl_exclusivity = MCA_BTL_EXCLUSIVITY_LOW + 1;
    m->btl_eager_limit = 4 * 1024;
    m->btl_rndv_eager_limit = 32 * 1024;
    m->btl_max_send_size = 128 * 1024;
    m->btl_rdma_pipeline_send_length = m->btl_eager_limit;
    m->btl_rdma_pipeline_frag_size = m->btl_max_send_size;
    m->btl_min_rdma_pipeline_size = 0;
    /* No SEND_INPLACE: with it ob1 sends an eager message of more than
     * 256 bytes by prepare_src and send, without it by sendi, which hands
     * the core the match header and the user's bytes (one copy either
     * way).  A 1 KiB stream's sender: 1,272 instructions a message, 1,096
     * by sendi.  prepare_src still points at user memory (the core copies
     * at send time) for what ob1 still sends by it: rendezvous and their
     * fragments, and its "complete" send mode.  No progress thread:
     * receive callbacks run only on the thread that calls progress. */
    m->btl_flags = MCA_BTL_FLAGS_SEND;
    /* btl_get (MCA_BTL_FLAGS_GET is added at init when single_copy is on):
     * any size, any alignment, no registration */
    m->btl_get_limit = SIZE_MAX;
    m->btl_get_alignment = 0;
    m->btl_registration_handle_size = 0;
    m->btl_latency = 1;
    m->btl_bandwidth = 20000;
    return mca_btl_base_param_register(&c->super.btl_version, m);
}

static int doorbell_component_open(void)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;

    c->module = NULL;
    c->output = opal_output_open(NULL);
    opal_output_set_verbosity(c->output, c->verbose);
    find_help_file();
    return OPAL_SUCCESS;
}

/* Every abort of an MPI process ends in orte_ess.abort: MPI_Abort, an
 * error handler that aborts, ompi_rte_abort.  Its peers are killed by the
 * runtime moments later, and each of them may first see this process, or
 * another victim, vanish: tell them now that the job is ending, so they
 * take those losses for the abort's doing, not for crashes
 * (mca_btl_doorbell_peer_lost). */
static orte_ess_base_module_abort_fn_t ess_abort_saved;

static void ess_abort_announcing(int status, bool report)
{
    mca_btl_doorbell_module_t *m = mca_btl_doorbell_component.module;

    if (NULL != m && NULL != m->core) {
        (void) doorbell_announce_abort(m->core);
    }
    ess_abort_saved(status, report);
}

static void abort_hook_install(void)
{
    if (&orte_ess != NULL && NULL != orte_ess.abort && ess_abort_announcing != orte_ess.abort) {
        ess_abort_saved = orte_ess.abort;
        orte_ess.abort = ess_abort_announcing;
    }
}

static void abort_hook_uninstall(void)
{
    if (&orte_ess != NULL && ess_abort_announcing == orte_ess.abort) {
        orte_ess.abort = ess_abort_saved;
    }
}

static int doorbell_component_close(void)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;

    /* before this .so can be unloaded: no slot or hook may point into it */
    mca_btl_doorbell_idle_uninstall();
    abort_hook_uninstall();
    if (c->output >= 0) {
        opal_output_close(c->output);
        c->output = -1;
    }
    free(c->bad_param_name);
    c->bad_param_name = NULL;
    return OPAL_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* init                                                                */

/* The shared-memory directory this rank uses: the parameter, else
 * DOORBELL_SHM_DIR, else /dev/shm (the core's own default order). */
static const char *shm_dir(const char **source)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    const char *env = getenv("DOORBELL_SHM_DIR");

    if (NULL != c->shm_dir && c->shm_dir[0]) {
        *source = "btl_doorbell_shm_dir";
        return c->shm_dir;
    }
    if (NULL != env && env[0]) {
        *source = "DOORBELL_SHM_DIR";
        return env;
    }
    *source = "default";
    return "/dev/shm";
}

/* Why `dir` cannot hold segments, or NULL if it can. */
static const char *bad_shm_dir(const char *dir)
{
    struct stat st;

    if ('/' != dir[0]) {
        return "not an absolute path";
    }
    if (0 != stat(dir, &st)) {
        return strerror(errno);
    }
    if (!S_ISDIR(st.st_mode)) {
        return "not a directory";
    }
    if (0 != access(dir, W_OK | X_OK)) {
        return "this user cannot create files there";
    }
    return NULL;
}

static bool validate_params(void)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    mca_btl_base_module_t *m = &mca_btl_doorbell_module.super;
    const char *host = opal_process_info.nodename ? opal_process_info.nodename : "?";
    char value[64];

    if (c->param_error) {
        mca_btl_doorbell_show_help(true, "invalid-param",
                                   "the value of %s on host %s is invalid (see the message "
                                   "above); the doorbell transport is disabled",
                                   c->bad_param_name ? c->bad_param_name : "a parameter", host);
        return false;
    }

#define BAD(name, fmt, val, why)                                                       \
    do {                                                                               \
        snprintf(value, sizeof(value), fmt, val);                                      \
        mca_btl_doorbell_show_help(true, "bad-value",                                  \
                                   "btl_doorbell_%s = %s is invalid: %s (host %s); "   \
                                   "the doorbell transport is disabled",               \
                                   name, value, why, host);                            \
        return false;                                                                  \
    } while (0)

    if (c->wait_mode != DOORBELL_WAIT_POLL && c->wait_mode != DOORBELL_WAIT_BLOCK &&
        c->wait_mode != DOORBELL_WAIT_ADAPTIVE) {
        BAD("wait_mode", "%d", c->wait_mode, "expected poll, block or adaptive");
    }
    if (0 == c->sleep_max_us) {
        BAD("sleep_max_us", "%u", c->sleep_max_us, "must be at least 1");
    }
    if (0 == c->sleep_poll_us) {
        BAD("sleep_poll_us", "%u", c->sleep_poll_us, "must be at least 1");
    }
    if (0 != c->ring_size &&
        (c->ring_size < 4096 || c->ring_size > (1u << 30) || (c->ring_size & (c->ring_size - 1)))) {
        BAD("ring_size", "%u", c->ring_size, "must be 0 or a power of 2 from 4096 to 1073741824");
    }
    /* force_tcp uses no shared memory (the core keeps the control segment
     * in private memory): the directory may be read-only or missing. */
    if (!c->force_tcp) {
        const char *source, *dir = shm_dir(&source), *why = bad_shm_dir(dir);
        if (NULL != why) {
            mca_btl_doorbell_show_help(true, "bad-shm-dir",
                                       "the shared-memory directory %s (from %s) on host %s is "
                                       "unusable: %s; the doorbell transport is disabled",
                                       dir, source, host, why);
            return false;
        }
    }
    if (c->port_min < 0 || c->port_min > 65535) {
        BAD("port_min", "%d", c->port_min, "must be 0..65535");
    }
    if (c->port_range < 0 || c->port_range > 65535) {
        BAD("port_range", "%d", c->port_range, "must be 0..65535");
    }
    if (c->if_include && c->if_include[0] && c->if_exclude && c->if_exclude[0]) {
        BAD("if_exclude", "%s", c->if_exclude, "btl_doorbell_if_include is also set; use one");
    }
    if (m->btl_eager_limit < 64) {
        BAD("eager_limit", "%zu", m->btl_eager_limit, "must be at least 64 (ob1's headers)");
    }
    if (m->btl_max_send_size < m->btl_eager_limit) {
        BAD("max_send_size", "%zu", m->btl_max_send_size, "must be >= btl_doorbell_eager_limit");
    }
    if (m->btl_rndv_eager_limit > m->btl_max_send_size) {
        BAD("rndv_eager_limit", "%zu", m->btl_rndv_eager_limit,
            "must be <= btl_doorbell_max_send_size");
    }
    if (c->tcp_eager_limit < 64) {
        BAD("tcp_eager_limit", "%zu", c->tcp_eager_limit, "must be at least 64 (ob1's headers)");
    }
    if (c->tcp_max_send_size < c->tcp_eager_limit) {
        BAD("tcp_max_send_size", "%zu", c->tcp_max_send_size,
            "must be >= btl_doorbell_tcp_eager_limit");
    }
    if (c->tcp_rndv_eager_limit > c->tcp_max_send_size) {
        BAD("tcp_rndv_eager_limit", "%zu", c->tcp_rndv_eager_limit,
            "must be <= btl_doorbell_tcp_max_send_size");
    }
#undef BAD
    return true;
}

/* What a rank's control segment and inbound queue take in the shared-memory
 * directory: a tmpfs charges whole pages. */
static unsigned long control_bytes(void)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    unsigned long page = (unsigned long) sysconf(_SC_PAGESIZE);

    return (DOORBELL_CONTROL_BYTES + DOORBELL_QUEUE_HEADER_BYTES +
            (c->ring_size ? c->ring_size : 1ul << 19) + page - 1) / page * page;
}

void mca_btl_doorbell_tell_no_room(int without)
{
    const char *host = opal_process_info.nodename ? opal_process_info.nodename : "?";
    const char *source, *dir = shm_dir(&source);

    mca_btl_doorbell_show_help(true, "no-shm-room",
                               "%d of the %d ranks on host %s found no room in the "
                               "shared-memory directory %s for their %lu-byte control segment; "
                               "their pairs go over doorbell's TCP, the others' over shared "
                               "memory",
                               without, 1 + opal_process_info.num_local_peers, host, dir,
                               control_bytes());
}

/* Core errors from endpoint_create, told in the user's terms. */
static void explain_create_failure(int rc)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    const char *host = opal_process_info.nodename ? opal_process_info.nodename : "?";

    switch (rc) {
    case DOORBELL_ERR_NO_INTERFACE:
        mca_btl_doorbell_show_help(true, "no-interface",
                                   "no network interface matches btl_doorbell_if_include=\"%s\" / "
                                   "btl_doorbell_if_exclude=\"%s\" on host %s; the doorbell "
                                   "transport is disabled",
                                   c->if_include ? c->if_include : "",
                                   c->if_exclude ? c->if_exclude : "", host);
        break;
    case DOORBELL_ERR_NO_SHM_SPACE: {
        /* Every rank that fails says so: the others may have found room. */
        const char *source, *dir = shm_dir(&source);
        unsigned long control = control_bytes();
        unsigned long ranks = 1 + opal_process_info.num_local_peers;
        mca_btl_doorbell_show_help(false, "no-shm-space",
                                   "no room in the shared-memory directory %s on host %s for "
                                   "this rank's %lu-byte control segment and inbound queue "
                                   "(%lu ranks here need %lu bytes of them; lower "
                                   "btl_doorbell_ring_size to need less); the doorbell "
                                   "transport is disabled",
                                   dir, host, control, ranks, control * ranks);
        break;
    }
    default:
        mca_btl_doorbell_show_help(false, "create-failed",
                                   "could not start on host %s: %s (core error %d); the doorbell "
                                   "transport is disabled",
                                   host, doorbell_error_string(rc), rc);
        break;
    }
}

/* Set btl_doorbell_<name> to `value` unless the user gave it a value. */
static void keep_default_or(const char *name, size_t *storage, size_t value)
{
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    int idx = mca_base_var_find("ompi", "btl", "doorbell", name);

    if (idx < 0) {
        idx = mca_base_var_find("opal", "btl", "doorbell", name);
    }
    if (idx >= 0) {
        (void) mca_base_var_get_value(idx, NULL, &source, NULL);
    }
    if (MCA_BASE_VAR_SOURCE_DEFAULT == source) {
        *storage = value;
    }
}

static mca_btl_base_module_t **doorbell_component_init(int *num_btls,
                                                       bool enable_progress_threads,
                                                       bool enable_mpi_threads)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    mca_btl_doorbell_module_t *tcp = &mca_btl_doorbell_tcp_module;
    mca_btl_base_module_t **modules;
    doorbell_config cfg;
    doorbell_endpoint *core = NULL;
    uint8_t blob[DOORBELL_ADDRESS_MAX];
    size_t blob_len = sizeof(blob);
    char job[48];
    opal_process_name_t me = OPAL_PROC_MY_NAME;
    int rc;

    calibrate_tsc();

    (void) enable_progress_threads;
    (void) enable_mpi_threads;
    *num_btls = 0;

    if (!validate_params()) {
        return NULL;
    }

    if (me.vpid >= DOORBELL_MAX_TASKS) {
        mca_btl_doorbell_show_help(false, "too-many-tasks",
                                   "rank %u is beyond the doorbell limit of %d ranks per job; the "
                                   "doorbell transport is disabled",
                                   (unsigned) me.vpid, DOORBELL_MAX_TASKS);
        return NULL;
    }

    rc = doorbell_config_init(&cfg);
    if (DOORBELL_OK != rc) {
        explain_create_failure(rc);
        return NULL;
    }

    job_key(job, sizeof(job), me.jobid);

    cfg.task = me.vpid;
    cfg.node_id = node_hash(opal_process_info.nodename);
    cfg.job = job;
    cfg.ring_bytes = c->ring_size;
    {
        const char *source;
        cfg.shm_dir = shm_dir(&source);
    }
    /* Adaptive with no spin is block (given spin_us 0, the core would spin
     * its default). */
    if (DOORBELL_WAIT_ADAPTIVE == c->wait_mode && 0 == c->spin_us) {
        c->wait_mode = DOORBELL_WAIT_BLOCK;
    }
    cfg.wait_mode = (uint32_t) c->wait_mode;
    cfg.spin_us = c->spin_us;
    cfg.force_tcp = c->force_tcp ? 1 : 0;
    cfg.if_include = (c->if_include && c->if_include[0]) ? c->if_include : NULL;
    cfg.if_exclude = (c->if_exclude && c->if_exclude[0]) ? c->if_exclude : NULL;
    /* The core queues (copies) only the first send a full ring or socket
     * refuses; later ones get WOULD_BLOCK and ob1's descriptor waits on the
     * module's pending list, as vader's does -- no second copy of a stream
     * that is already behind (two-way 1-4 MiB windows: 0.45x -> 0.9x vader). */
    cfg.max_backlog = 1;
    /* Every local peer maps this rank's control segment when add_procs
     * connects it (Open MPI adds local peers at MPI_Init); the last one
     * removes its name, so a rank killed later leaves no file behind.  Over
     * TCP nobody maps it: it has no file at all. */
    cfg.local_peers = c->force_tcp ? 0 : (int32_t) opal_process_info.num_local_peers;
    if (c->port_min > 0) {
        int range = c->port_range > 0 ? c->port_range : 65536 - c->port_min;
        int max = c->port_min + range - 1;
        cfg.port_min = (uint16_t) c->port_min;
        cfg.port_max = (uint16_t) (max > 65535 ? 65535 : max);
    }

    opal_output_verbose(10, c->output,
                        "btl doorbell: init task %u job %s node %s (id %016llx) wait_mode %d "
                        "force_tcp %d",
                        cfg.task, cfg.job, opal_process_info.nodename,
                        (unsigned long long) cfg.node_id, c->wait_mode, (int) cfg.force_tcp);

    c->no_room = false;
    rc = doorbell_endpoint_create(&cfg, &core);
    if (DOORBELL_ERR_NO_SHM_SPACE == rc && !cfg.force_tcp) {
        /* No room for this rank's control segment: the rank goes on without
         * shared memory, and every pair of it over the core's TCP.  Its
         * modex says so; local rank 0 tells the user once (add_procs). */
        cfg.force_tcp = 1;
        cfg.local_peers = 0;
        rc = doorbell_endpoint_create(&cfg, &core);
        c->no_room = DOORBELL_OK == rc;
        opal_output_verbose(1, c->output,
                            "btl doorbell: rank %u: no room in the shared-memory directory; "
                            "its pairs go over TCP",
                            cfg.task);
    }
    if (DOORBELL_OK != rc || NULL == core) {
        explain_create_failure(DOORBELL_OK != rc ? rc : DOORBELL_ERR_INTERNAL);
        return NULL;
    }

    rc = doorbell_address(core, blob, &blob_len);
    if (DOORBELL_OK != rc) {
        explain_create_failure(rc);
        (void) doorbell_endpoint_destroy(core);
        return NULL;
    }

    /* The modex carries this rank's pid and probe word before the address.
     * The address holds this rank's random 128-bit TCP secret: a peer may
     * connect only by answering a challenge with a keyed hash of it (the
     * core's handshake.rs), so the modex, which reaches only this job's
     * ranks, is what lets a process in.  Each rank has its own secret: every
     * rank gets every address, so this proves what one secret per job would,
     * with nothing for the ranks to agree on. */
    uint8_t modex[sizeof(mca_btl_doorbell_modex_head_t) + sizeof(blob)];
    mca_btl_doorbell_modex_head_t head = {
        .pid = (uint64_t) getpid(),
        .probe_address = (uint64_t) (uintptr_t) &mca_btl_doorbell_cma_probe_word,
        .flags = c->no_room ? MCA_BTL_DOORBELL_MODEX_NO_ROOM : 0,
    };
    memcpy(modex, &head, sizeof(head));
    memcpy(modex + sizeof(head), blob, blob_len);
    rc = mca_btl_doorbell_modex_send(modex, sizeof(head) + blob_len);
    if (OPAL_SUCCESS != rc) {
        mca_btl_doorbell_show_help(false, "modex-failed",
                                   "could not publish this rank's address (error %d); the "
                                   "doorbell transport is disabled",
                                   rc);
        (void) doorbell_endpoint_destroy(core);
        return NULL;
    }

    if (!c->single_copy || c->force_tcp) {
        /* No single copy: a small eager limit would only add round trips.
         * Limits the user set stay as set. */
        keep_default_or("eager_limit", &mca_btl_doorbell_module.super.btl_eager_limit,
                        c->tcp_eager_limit);
        keep_default_or("rndv_eager_limit", &mca_btl_doorbell_module.super.btl_rndv_eager_limit,
                        c->tcp_rndv_eager_limit);
    }
    /* The TCP module: the shm module's functions, its own limits, and GET
     * by reads over the connection (btl_doorbell_get.c), which need the
     * sender's buffer registered (exposed to the reader). */
    tcp->super = mca_btl_doorbell_module.super;
    if (c->single_copy) {
        tcp->super.btl_flags |= MCA_BTL_FLAGS_GET;
        tcp->super.btl_register_mem = mca_btl_doorbell_register_mem;
        tcp->super.btl_deregister_mem = mca_btl_doorbell_deregister_mem;
        tcp->super.btl_registration_handle_size = sizeof(mca_btl_base_registration_handle_t);
        /* the core's frames are at most max_message (1 GiB) long */
        tcp->super.btl_get_limit = (size_t) 1 << 30;
        /* the reading side needs no registration of its own buffer */
        tcp->super.btl_get_local_registration_threshold = SIZE_MAX;
    }
    tcp->super.btl_eager_limit = c->tcp_eager_limit;
    tcp->super.btl_rndv_eager_limit = c->tcp_rndv_eager_limit;
    tcp->super.btl_max_send_size = c->tcp_max_send_size;
    tcp->super.btl_rdma_pipeline_send_length = c->tcp_eager_limit;
    tcp->super.btl_rdma_pipeline_frag_size = c->tcp_max_send_size;
    /* No btl_put: a receiver must never answer a rendezvous with ob1's
     * PUT pipeline (its sender would call a NULL btl_put).  ob1 runs that
     * pipeline for rendezvous messages longer than this (bml's
     * btl_send_limit); they then go by fragments. */
    tcp->super.btl_min_rdma_pipeline_size = SIZE_MAX;

    rc = mca_btl_doorbell_module_init(&mca_btl_doorbell_module, core, me.vpid,
                                      &mca_btl_doorbell_module);
    if (OPAL_SUCCESS != rc) {
        (void) doorbell_endpoint_destroy(core);
        return NULL;
    }
    rc = mca_btl_doorbell_module_init(tcp, core, me.vpid, &mca_btl_doorbell_module);
    if (OPAL_SUCCESS != rc) {
        tcp->main = NULL;
        (void) mca_btl_doorbell_finalize(&mca_btl_doorbell_module.super);
        return NULL;
    }

    modules = (mca_btl_base_module_t **) malloc(2 * sizeof(*modules));
    if (NULL == modules) {
        (void) mca_btl_doorbell_finalize(&mca_btl_doorbell_module.super);
        return NULL;
    }
    modules[0] = &mca_btl_doorbell_module.super;
    modules[1] = &tcp->super;
    c->module = &mca_btl_doorbell_module;
    if (c->single_copy && !c->force_tcp) {
        /* cleared again by add_procs for a peer that cannot be read */
        mca_btl_doorbell_module.super.btl_flags |= MCA_BTL_FLAGS_GET;
    }
    if (c->single_copy) {
        /* put, get and atomics for osc rdma (btl_doorbell_rdma.c): one-sided
         * communication with Open MPI's default osc list */
        mca_btl_doorbell_rdma_setup(&mca_btl_doorbell_module.super, &tcp->super);
        mca_btl_doorbell_prefer_osc_sm();
        /* osc rdma loads after this component: its dynamic windows across
         * nodes need the fix of hooks/btl_doorbell_osc_fix.c */
        if (mca_btl_doorbell_osc_fix_install()) {
            mca_btl_doorbell_dlopen_install();
        }
    }
    abort_hook_install();
    if (DOORBELL_WAIT_POLL != c->wait_mode && !mca_btl_doorbell_idle_install()) {
        opal_output_verbose(1, c->output,
                            "btl doorbell: cannot hook Open MPI's idle point (sched_yield in "
                            "libopen-pal); this rank polls instead of sleeping");
    } else if (DOORBELL_WAIT_POLL != c->wait_mode) {
        opal_output_verbose(1, c->output, "btl doorbell: rank %u: blocking MPI calls: %d slots wrapped",
                            me.vpid, mca_btl_doorbell_blocking_slots());
    }
    *num_btls = 2;
    return modules;
}

/* ------------------------------------------------------------------ */
/* progress                                                            */

void mca_btl_doorbell_recv_cb(void *ctx, uint32_t task, uint32_t window, uint8_t tag,
                              const uint8_t *data, size_t len)
{
    mca_btl_doorbell_module_t *module = (mca_btl_doorbell_module_t *) ctx;
    const mca_btl_active_message_callback_t *reg = mca_btl_base_active_message_trigger + tag;
    /* ob1 finds its state for a message by the module that reached the
     * sender (shm or TCP) */
    mca_btl_doorbell_endpoint_t *ep = task < module->npeers_alloc ? module->peers[task] : NULL;
    mca_btl_doorbell_module_t *via = NULL != ep ? ep->module
                                   : (1 == doorbell_peer_path(module->core, task) ? module
                                                                                 : &mca_btl_doorbell_tcp_module);
    mca_btl_base_segment_t segment = {.seg_addr.pval = (void *) data, .seg_len = len};
    /* A copy of a zeroed descriptor, not an initializer: GCC zeroes the
     * 104-byte descriptor with `rep stos`, microcoded, ~30 cycles to start
     * on every message; a copy is six vector moves. */
    static const mca_btl_base_descriptor_t zero_des;
    mca_btl_base_descriptor_t des = zero_des;

    des.des_segments = &segment;
    des.des_segment_count = 1;

    (void) window;
    if (OPAL_UNLIKELY(MCA_BTL_DOORBELL_TAG_ATOMIC == tag)) {
        mca_btl_doorbell_atomic_recv(module, task, data, len);
        return;
    }
    if (OPAL_UNLIKELY(NULL == reg->cbfunc)) {
        opal_output(0, "btl doorbell: dropped a %zu-byte message with unregistered tag %u "
                       "from task %u", len, (unsigned) tag, task);
        return;
    }
    /* `data` is valid only during this call; so is the descriptor, which
     * is exactly ob1's contract for receive callbacks. */
    reg->cbfunc(&via->super, tag, &des, reg->cbdata);
}

/* One-sided windows.  Open MPI ranks osc rdma (101) above osc sm (100), so
 * with put, get and atomics offered here MPI_Win_allocate windows of one
 * node would leave osc sm, whose synchronisation is loads and stores in
 * shared memory, for osc rdma's, which calls opal_progress in every flush
 * (and yields there when ranks outnumber cores: bench/real's rma at 4
 * ranks took 4.3 s against 1.0 s).  In a job whose BTL list is self and
 * doorbell, osc rdma's priority goes just below osc sm's: it then takes
 * the windows osc sm cannot (MPI_Win_create, several nodes).  BTLs are
 * initialized before the osc framework reads its parameters, so an
 * environment variable does it; one the user set stays, and jobs with
 * other BTLs are left alone. */
void mca_btl_doorbell_prefer_osc_sm(void)
{
    const char **list = NULL;
    mca_base_var_source_t source;
    int idx = mca_base_var_find("opal", "btl", NULL, NULL);
    char *copy, *save = NULL;
    bool ours = false;

    if (idx < 0 || OPAL_SUCCESS != mca_base_var_get_value(idx, &list, &source, NULL) ||
        NULL == list || NULL == list[0] || '^' == list[0][0]) {
        return;
    }
    copy = strdup(list[0]);
    if (NULL == copy) {
        return;
    }
    for (char *name = strtok_r(copy, ",", &save); NULL != name; name = strtok_r(NULL, ",", &save)) {
        while (' ' == *name) {
            ++name;
        }
        if (0 == strcmp(name, "doorbell")) {
            ours = true;
        } else if (0 != strcmp(name, "self")) {
            ours = false;
            break;
        }
    }
    free(copy);
    if (ours && 0 == setenv("OMPI_MCA_osc_rdma_priority", "99", 0)) {
        opal_output_verbose(10, mca_btl_doorbell_component.output,
                            "btl doorbell: osc_rdma_priority %s (osc sm first for MPI_Win_allocate)",
                            getenv("OMPI_MCA_osc_rdma_priority"));
    }
}

/* Another BTL's traffic only moves when opal_progress spins, so sleeping
 * here would starve it: allow sleeps only if every other BTL module is
 * "self" (which has no progress function of its own). */
void mca_btl_doorbell_check_sleep_allowed(mca_btl_doorbell_module_t *module)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    mca_btl_base_selected_module_t *sm;

    module->sleep_allowed = true;
    OPAL_LIST_FOREACH(sm, &mca_btl_base_modules_initialized, mca_btl_base_selected_module_t) {
        const char *name = sm->btl_component->btl_version.mca_component_name;
        if (0 != strcmp(name, "self") && 0 != strcmp(name, "doorbell")) {
            module->sleep_allowed = false;
            if (c->wait_mode != DOORBELL_WAIT_POLL) {
                opal_output_verbose(1, c->output,
                                    "btl doorbell: btl %s is also active, so this rank polls "
                                    "instead of sleeping (use --mca btl self,doorbell to sleep)",
                                    name);
            }
            break;
        }
    }
    module->sleep_checked = true;
}

void mca_btl_doorbell_core_error(mca_btl_doorbell_module_t *module, int rc, const doorbell_wake *wake)
{
    static int reported = 0;

    if (DOORBELL_ERR_PEER_LOST == rc) {
        mca_btl_doorbell_peer_lost(module, wake->task);
        return;
    }
    if (mca_btl_doorbell_is_corrupt(rc)) {
        mca_btl_doorbell_peer_corrupt(module, wake->task, rc);
        return;
    }
    if (DOORBELL_ERR_FLIH_FAILED == rc) {
        /* The core's event thread died (it said why on stderr): no more
         * TCP wake-ups or lost-peer reports, and every progress fails from
         * now on.  The rank would hang; end the job, as after a lost peer. */
        char msg[256];
        snprintf(msg, sizeof(msg), "btl doorbell: rank %u: %s", module->my_task,
                 doorbell_error_string(rc));
        if (NULL != module->error_cb) {
            module->error_cb(&module->super, MCA_BTL_ERROR_FLAGS_FATAL, NULL, msg);
        }
        opal_output(0, "%s; exiting", msg);
        exit(1);
    }
    /* Not fatal by contract (INTERNAL: "the endpoint stays usable"); say it
     * a few times, not once per progress call. */
    if (reported < 5) {
        ++reported;
        opal_output(0, "btl doorbell: progress on task %u failed: %s (%d)", module->my_task,
                    doorbell_error_string(rc), rc);
    }
}

/* Whether a send happened since the last pass, and forget it.  A plain
 * load and store, not a swap: right after a send the swap's locked
 * instruction waited for the send's stores to reach the receiver's core
 * (80% of this callback's time at 8 ranks on 2 cores).  Another thread's
 * send between the two may go unnoticed: it is only a hint that a reply
 * is coming, so the wait spins afresh. */
static inline bool take_send_activity(mca_btl_doorbell_module_t *module)
{
    if (0 == module->send_activity) {
        return false;
    }
    module->send_activity = 0;
    return true;
}

/* Every pass ends here: tell the idle point whether it was active, and
 * release progress_busy.  A send since the last pass (this thread's or
 * another's) is activity too: a reply usually follows, so the wait starts
 * afresh. */
static inline int end_pass(mca_btl_doorbell_module_t *module, int count)
{
    bool active = take_send_activity(module) || count > 0;
    mca_btl_doorbell_idle_note_pass(module, active ? 1 : 0);
    opal_atomic_wmb();
    module->progress_busy = 0;
    return count;
}

/* The pass proper: the send batch, deferred completions and refused sends,
 * the core's progress, reads.  Called with progress_busy held; releases it.
 * Out of line, so the empty pass (below) sets up no frame for it. */
static __attribute__((noinline)) int full_pass(mca_btl_doorbell_module_t *module)
{
    doorbell_wake wake = {0, 0};
    int count = 0, rc;

    /* The small control frames this pass sends (ob1's FIN per finished
     * read, read requests, ACKs) leave together at its end, one write per
     * connection, instead of one TCP trip each. */
    /* Only TCP holds frames: a job without TCP peers skips the batch's
     * thread-local bookkeeping (~90 instructions a pass). */
    bool batch = 0 != (module->paths_seen & (1u << MCA_BTL_DOORBELL_PATH_TCP));

    mca_btl_doorbell_idle_teach(module);
    if (batch) {
        (void) doorbell_batch_begin();
    }
    module->in_pass = 1;
    if (module->ndeferred) {
        count += mca_btl_doorbell_deferred_gets_run(module);
    }
    if (module->ncompleted) {
        count += mca_btl_doorbell_drain_completed(module);
    }
    if (module->npending) {
        count += mca_btl_doorbell_retry_pending(module);
    }

    rc = doorbell_progress(module->core, MCA_BTL_DOORBELL_WINDOW, mca_btl_doorbell_recv_cb,
                           module, &wake);
    if (rc > 0) {
        count += rc;
    } else if (OPAL_UNLIKELY(rc < 0)) {
        mca_btl_doorbell_core_error(module, rc, &wake);
        if (NULL == module->core) {
            /* a lost peer ended this rank's use of the core */
            if (batch) {
                (void) doorbell_batch_end();
            }
            module->in_pass = 0;
            module->progress_busy = 0;
            return count;
        }
    }
    if (module->nreads) {
        count += mca_btl_doorbell_reads_progress(module);
    }

    /* Completions of sends made by the callbacks above (a rendezvous ACK
     * schedules the rest of a message): run now, not at the next pass.  A
     * caller whose wait this pass ends (the peer's reply came in the same
     * pass) would otherwise find its earlier send still incomplete -- and a
     * buffered send's space still taken (MPI_Bsend failed with
     * MPI_ERR_BUFFER on a buffer sized for one burst). */
    if (module->ncompleted) {
        count += mca_btl_doorbell_drain_completed(module);
    }
    module->in_pass = 0;
    if (batch) {
        (void) doorbell_batch_end();
    }
    return end_pass(module, count);
}

/* The pass over the shared-memory queue and fast boxes alone, when the
 * core said nothing else is there (doorbell_work_pending 2): no send batch,
 * no TCP, backlogs or peer events, which the next full pass sees.  ~200
 * instructions less per delivering pass, paid once per message at 4 and 8
 * ranks on 2 cores.  Called with progress_busy held; releases it. */
static __attribute__((noinline)) int local_pass(mca_btl_doorbell_module_t *module)
{
    mca_btl_doorbell_idle_teach(module);
    module->in_pass = 1;
    int count = doorbell_progress_local(module->core, MCA_BTL_DOORBELL_WINDOW,
                                        mca_btl_doorbell_recv_cb, module);
    module->in_pass = 0;

    if (OPAL_UNLIKELY(count < 0)) {
        doorbell_wake wake = {0, 0};
        mca_btl_doorbell_core_error(module, count, &wake);
        count = 0;
    }
    /* completions of sends the callbacks made (full_pass says why) */
    if (module->ncompleted) {
        count += mca_btl_doorbell_drain_completed(module);
    }
    return end_pass(module, count);
}

static int doorbell_component_progress(void)
{
    mca_btl_doorbell_module_t *module = mca_btl_doorbell_component.module;

    if (OPAL_UNLIKELY(NULL == module || NULL == module->core)) {
        return 0;
    }
    /* The core progresses a window from one thread at a time, and so does
     * the idle point's bookkeeping.  Without threads there is no other
     * caller, and the locked swap (on every poll) is skipped. */
    if (opal_using_threads() && opal_atomic_swap_32(&module->progress_busy, 1)) {
        return 0;
    }

    /* Most passes find nothing, and with more ranks than cores every
     * rank's empty pass delays the others' turns.  One question to the core
     * (plain loads, no lock) before the send batch and the full pass. */
    if (0 == module->ncompleted && 0 == module->npending && 0 == module->nreads &&
        0 == module->ndeferred) {
        int work = doorbell_work_pending(module->core, MCA_BTL_DOORBELL_WINDOW);
        if (0 == work) {
            /* A send since the last pass is activity (end_pass), but needs
             * no full pass of its own: the send is done. */
            return end_pass(module, 0);
        }
        /* Only shared-memory messages: the short pass, unless the callbacks'
         * control frames may go to TCP peers (they want the send batch). */
        if (2 == work && 0 == (module->paths_seen & (1u << MCA_BTL_DOORBELL_PATH_TCP))) {
            return local_pass(module);
        }
    }
    return full_pass(module);
}
