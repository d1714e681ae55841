/* btl_doorbell_module.c -- add_procs/del_procs/finalize, descriptors
 * (alloc, free, prepare_src).  Sending is in btl_doorbell_send.c.
 */
#include "opal_config.h"

#include <string.h>

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/hwloc/base/base.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"
#include "btl_doorbell_frag.h"

static int doorbell_register_error(struct mca_btl_base_module_t *btl,
                                   mca_btl_base_module_error_cb_fn_t cbfunc);

mca_btl_doorbell_module_t mca_btl_doorbell_module = {
    .super = {
        .btl_component = &mca_btl_doorbell_component.super,
        .btl_add_procs = mca_btl_doorbell_add_procs,
        .btl_get = mca_btl_doorbell_get,
        .btl_del_procs = mca_btl_doorbell_del_procs,
        .btl_finalize = mca_btl_doorbell_finalize,
        .btl_alloc = mca_btl_doorbell_alloc,
        .btl_free = mca_btl_doorbell_free,
        .btl_prepare_src = mca_btl_doorbell_prepare_src,
        .btl_send = mca_btl_doorbell_send,
        .btl_sendi = mca_btl_doorbell_sendi,
        .btl_dump = mca_btl_base_dump,
        .btl_register_error = doorbell_register_error,
    },
};

/* Filled in at init: the same functions, the TCP limits, GET over TCP. */
mca_btl_doorbell_module_t mca_btl_doorbell_tcp_module;

/* ------------------------------------------------------------------ */
/* endpoint class                                                      */

static void endpoint_construct(mca_btl_doorbell_endpoint_t *ep)
{
    ep->proc = NULL;
    ep->task = UINT32_MAX;
    ep->path = 0;
    OBJ_CONSTRUCT(&ep->pending, opal_list_t);
    ep->npending = 0;
    ep->on_pending_list = false;
    ep->deleted = false;
    ep->lost = false;
    ep->real = NULL;
    ep->rma_alias = NULL;
}

static void endpoint_destruct(mca_btl_doorbell_endpoint_t *ep)
{
    if (NULL != ep->rma_alias) {
        OBJ_RELEASE(ep->rma_alias);
    }
    OBJ_DESTRUCT(&ep->pending);
}

OBJ_CLASS_INSTANCE(mca_btl_doorbell_endpoint_t, opal_list_item_t, endpoint_construct,
                   endpoint_destruct);

/* ------------------------------------------------------------------ */
/* setup                                                               */

static int init_frag_list(opal_free_list_t *list, size_t bufsize)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;

    OBJ_CONSTRUCT(list, opal_free_list_t);
    return opal_free_list_init(list, sizeof(mca_btl_doorbell_frag_t) + bufsize,
                               opal_cache_line_size, OBJ_CLASS(mca_btl_doorbell_frag_t), 0,
                               opal_cache_line_size, c->free_list_num, c->free_list_max,
                               c->free_list_inc, NULL, 0, NULL, mca_btl_doorbell_frag_init, list);
}

int mca_btl_doorbell_module_init(mca_btl_doorbell_module_t *module, doorbell_endpoint *core,
                                 uint32_t my_task, mca_btl_doorbell_module_t *main)
{
    mca_btl_base_module_t *m = &module->super;
    int rc;

    module->main = main;
    module->core = core;
    module->my_task = my_task;
    module->error_cb = NULL;

    /* eager covers alloc() of eager-size messages, in-place headers and the
     * rendezvous first fragment; max covers prepare_src packing up to
     * max_send_size */
    module->eager_frag_size = m->btl_eager_limit > m->btl_rndv_eager_limit
                                  ? m->btl_eager_limit
                                  : m->btl_rndv_eager_limit;
    module->max_frag_size = m->btl_max_send_size > module->eager_frag_size
                                ? m->btl_max_send_size
                                : module->eager_frag_size;

    rc = init_frag_list(&module->eager_frags, module->eager_frag_size);
    if (OPAL_SUCCESS != rc) {
        OBJ_DESTRUCT(&module->eager_frags);
        return rc;
    }
    rc = init_frag_list(&module->max_frags, module->max_frag_size);
    if (OPAL_SUCCESS != rc) {
        OBJ_DESTRUCT(&module->max_frags);
        OBJ_DESTRUCT(&module->eager_frags);
        return rc;
    }

    OBJ_CONSTRUCT(&module->lock, opal_mutex_t);
    OBJ_CONSTRUCT(&module->completed_lock, opal_mutex_t);
    OBJ_CONSTRUCT(&module->completed, opal_list_t);
    OBJ_CONSTRUCT(&module->pending_lock, opal_mutex_t);
    OBJ_CONSTRUCT(&module->pending_endpoints, opal_list_t);
    OBJ_CONSTRUCT(&module->deferred_lock, opal_mutex_t);
    module->deferred_head = NULL;
    module->deferred_tail = &module->deferred_head;
    module->ndeferred = 0;
    module->in_pass = 0;
    module->peers = NULL;
    module->npeers_alloc = 0;
    module->ncompleted = 0;
    module->npending = 0;
    module->progress_busy = 0;
    module->send_activity = 0;
    mca_btl_doorbell_idle_reset(module);
    module->sleep_checked = false;
    module->sleep_allowed = false;
    module->finalizing = false;
    module->sleeps = 0;
    module->single_copy_reads = 0;
    module->tcp_reads = 0;
    module->single_copy_writes = 0;
    module->rma_ops = 0;
    module->shm_atomics = 0;
    module->atomics_served = 0;
    module->nreads = 0;
    module->sleep_timeouts = 0;
    module->polled_sleeps = 0;
    module->stalls = 0;
    module->ran_out = false;
    module->sends_queued = 0;
    return OPAL_SUCCESS;
}

static int doorbell_register_error(struct mca_btl_base_module_t *btl,
                                   mca_btl_base_module_error_cb_fn_t cbfunc)
{
    /* per module: ob1 registers with each */
    ((mca_btl_doorbell_module_t *) btl)->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* procs                                                               */

static int ensure_peer_slot(mca_btl_doorbell_module_t *module, uint32_t task)
{
    uint32_t n;
    mca_btl_doorbell_endpoint_t **grown;

    if (task < module->npeers_alloc) {
        return OPAL_SUCCESS;
    }
    n = module->npeers_alloc ? module->npeers_alloc : 64;
    while (n <= task) {
        n *= 2;
    }
    if (n > DOORBELL_MAX_PEERS) {
        n = DOORBELL_MAX_PEERS;
    }
    grown = realloc(module->peers, n * sizeof(*grown));
    if (NULL == grown) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    memset(grown + module->npeers_alloc, 0, (n - module->npeers_alloc) * sizeof(*grown));
    module->peers = grown;
    module->npeers_alloc = n;
    return OPAL_SUCCESS;
}

/* The endpoint made for `proc` already, if any.  The peer table is
 * indexed by the core's peer id: a proc of this job's is its vpid; one of
 * another job (spawned, connected, joined) has an id the core gave it, from
 * DOORBELL_MAX_TASKS up, found by its name. */
static mca_btl_doorbell_endpoint_t *known_endpoint(mca_btl_doorbell_module_t *main,
                                                   const struct opal_proc_t *proc)
{
    if (proc->proc_name.jobid == OPAL_PROC_MY_NAME.jobid) {
        return proc->proc_name.vpid < main->npeers_alloc ? main->peers[proc->proc_name.vpid] : NULL;
    }
    for (uint32_t t = DOORBELL_MAX_TASKS; t < main->npeers_alloc; ++t) {
        mca_btl_doorbell_endpoint_t *ep = main->peers[t];
        if (NULL != ep && 0 == opal_compare_proc(ep->proc->proc_name, proc->proc_name)) {
            return ep;
        }
    }
    return NULL;
}

/* What `module` hands bml for `ep`: `ep` if its path is the module's.
 * The TCP module also reaches this process and its same-node peers, by an
 * RMA-only alias (btl_doorbell_endpoint.h): its lower exclusivity keeps it
 * off their send lists, and ob1 uses no RDMA endpoint that is not on the
 * eager list, so only osc rdma sees it.  A peer whose memory cannot be
 * read gets none (osc rdma then finds no module, as before). */
static mca_btl_doorbell_endpoint_t *reach(mca_btl_doorbell_module_t *module,
                                          mca_btl_doorbell_endpoint_t *ep)
{
    mca_btl_doorbell_module_t *main = module->main;
    mca_btl_doorbell_endpoint_t *alias;

    if (ep->module == module) {
        ep->deleted = false;
        return ep;
    }
    if (module != &mca_btl_doorbell_tcp_module || ep->module != main ||
        !(module->super.btl_flags & MCA_BTL_FLAGS_ATOMIC_FOPS) ||
        module->super.btl_exclusivity >= main->super.btl_exclusivity ||
        (ep->task != main->my_task && !ep->cma)) {
        return NULL;
    }
    if (NULL == ep->rma_alias) {
        alias = OBJ_NEW(mca_btl_doorbell_endpoint_t);
        if (NULL == alias) {
            return NULL;
        }
        alias->proc = ep->proc;
        alias->task = ep->task;
        alias->path = ep->path;
        alias->module = ep->module;
        alias->pid = ep->pid;
        alias->cma = ep->cma;
        alias->real = ep;
        ep->rma_alias = alias;
    }
    ep->rma_alias->deleted = false;
    return ep->rma_alias;
}

/* Connect one proc: modex blob -> doorbell_connect -> endpoint.  Returns
 * NULL (proc unreachable by this BTL) on any failure, with the reason in
 * the verbose output.  A proc of another job is reached like one of ours:
 * Open MPI hands add_procs the modex entry of the other job's process
 * (spawn, connect/accept, join), whose address holds that process's own
 * secret (the core's handshake) and shm token; the core gives it a peer id
 * of its own. */
static mca_btl_doorbell_endpoint_t *connect_proc(mca_btl_doorbell_module_t *module,
                                                 struct opal_proc_t *proc)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    mca_btl_doorbell_module_t *main = module->main, *shm;
    mca_btl_doorbell_endpoint_t *ep;
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    uint32_t task = UINT32_MAX;
    int rc, path;
    bool ompi_local, core_local, no_room;
    bool same_job = proc->proc_name.jobid == OPAL_PROC_MY_NAME.jobid;

    if (same_job && proc->proc_name.vpid >= DOORBELL_MAX_TASKS) {
        return NULL;
    }
    ep = known_endpoint(main, proc);
    if (NULL != ep) {
        /* a proc we already know (the other module's add_procs, or an
         * earlier call) */
        return reach(module, ep);
    }

    rc = mca_btl_doorbell_modex_recv(proc, &blob, &blob_len);
    if (OPAL_SUCCESS != rc || NULL == blob) {
        opal_output_verbose(1, c->output,
                            "btl doorbell: no doorbell address from %s (error %d); not reachable",
                            OPAL_NAME_PRINT(proc->proc_name), rc);
        return NULL;
    }
    mca_btl_doorbell_modex_head_t head;
    if (blob_len < sizeof(head)) {
        opal_output(0, "btl doorbell: the doorbell address of %s is %zu bytes, too short",
                    OPAL_NAME_PRINT(proc->proc_name), blob_len);
        free(blob);
        return NULL;
    }
    memcpy(&head, blob, sizeof(head));
    rc = doorbell_connect(module->core, blob + sizeof(head), blob_len - sizeof(head), &task);
    free(blob);
    if (DOORBELL_OK != rc) {
        opal_output(0, "btl doorbell: connecting to %s failed: %s (%d)",
                    OPAL_NAME_PRINT(proc->proc_name), doorbell_error_string(rc), rc);
        return NULL;
    }
    /* another job's proc has a peer id of the core's giving; if the core
     * took it for one of ours, the two jobs' keys collided */
    if (same_job ? task != proc->proc_name.vpid : task < DOORBELL_MAX_TASKS) {
        opal_output(0, "btl doorbell: address of %s gave peer id %u; expected %s %u",
                    OPAL_NAME_PRINT(proc->proc_name), task, same_job ? "its vpid" : "at least",
                    same_job ? (unsigned) proc->proc_name.vpid : (unsigned) DOORBELL_MAX_TASKS);
        return NULL;
    }
    if (OPAL_SUCCESS != ensure_peer_slot(main, task)) {
        return NULL;
    }

    path = doorbell_peer_path(module->core, task);
    if (path < 0) {
        opal_output(0, "btl doorbell: no path to %s: %s (%d)", OPAL_NAME_PRINT(proc->proc_name),
                    doorbell_error_string(path), path);
        return NULL;
    }
    main->paths_seen |= 1u << path;

    /* node_id is a hash of the node name; Open MPI's own locality comes from
     * the runtime.  If they disagree, one of them is wrong and shm/tcp
     * selection with it. */
    ompi_local = OPAL_PROC_ON_LOCAL_NODE(proc->proc_flags);
    core_local = (1 == path);
    no_room = c->no_room || (head.flags & MCA_BTL_DOORBELL_MODEX_NO_ROOM);
    if (ompi_local && same_job && task != module->my_task &&
        (head.flags & MCA_BTL_DOORBELL_MODEX_NO_ROOM)) {
        c->roomless_peers++;
    }
    /* (a rank without room is reached over TCP on purpose) */
    if (!c->force_tcp && !no_room && ompi_local != core_local) {
        opal_output(0, "btl doorbell: warning: Open MPI says %s is %s this node but the "
                       "doorbell core reaches it over %s",
                    OPAL_NAME_PRINT(proc->proc_name), ompi_local ? "on" : "not on",
                    mca_btl_doorbell_path_name(path));
    }

    ep = OBJ_NEW(mca_btl_doorbell_endpoint_t);
    if (NULL == ep) {
        return NULL;
    }
    ep->proc = proc;
    ep->task = task;
    ep->path = path;
    ep->pid = (pid_t) head.pid;
    /* same node: the shm module; elsewhere (or force_tcp): the TCP module */
    ep->module = 1 == path ? main : &mca_btl_doorbell_tcp_module;
    /* single copy needs a same-node peer whose memory this process can
     * read; one that cannot be read ends GET for the endpoints bml adds
     * from now on (it reads the flag per endpoint, after add_procs) */
    shm = ep->module;
    ep->cma = 1 == path && (shm->super.btl_flags & MCA_BTL_FLAGS_GET) &&
              mca_btl_doorbell_cma_probe(ep->pid, head.probe_address);
    if (1 == path && !ep->cma && (shm->super.btl_flags & MCA_BTL_FLAGS_GET)) {
        /* (and PUT: osc rdma then finds no RDMA here) */
        shm->super.btl_flags &= ~MCA_BTL_FLAGS_RDMA;
        opal_output_verbose(1, c->output,
                            "btl doorbell: %s cannot be read with process_vm_readv (other pid "
                            "namespace or ptrace policy); large messages to it and to later "
                            "peers go through the ring",
                            OPAL_NAME_PRINT(proc->proc_name));
    }
    main->peers[task] = ep;

    opal_output_verbose(10, c->output, "btl doorbell: task %u -> %s is task %u via %s",
                        module->my_task, OPAL_NAME_PRINT(proc->proc_name), task,
                        mca_btl_doorbell_path_name(path));
    return reach(module, ep);
}

int mca_btl_doorbell_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                               struct opal_proc_t **procs,
                               struct mca_btl_base_endpoint_t **endpoints,
                               struct opal_bitmap_t *reachable)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    mca_btl_doorbell_module_t *module = (mca_btl_doorbell_module_t *) btl;
    int rc = OPAL_SUCCESS;

    /* the shared peer table's lock */
    OPAL_THREAD_LOCK(&module->main->lock);
    for (size_t i = 0; i < nprocs; ++i) {
        mca_btl_doorbell_endpoint_t *ep = connect_proc(module, procs[i]);

        endpoints[i] = ep;
        if (NULL != ep && NULL != reachable) {
            rc = opal_bitmap_set_bit(reachable, (int) i);
            if (OPAL_SUCCESS != rc) {
                break;
            }
        }
    }
    /* Open MPI adds every same-node peer at MPI_Init: local rank 0 knows
     * by now which ranks here found no room, and says so once. */
    if (!c->room_told && 0 == opal_process_info.my_local_rank && (c->no_room || c->roomless_peers > 0)) {
        c->room_told = true;
        mca_btl_doorbell_tell_no_room(c->roomless_peers + (c->no_room ? 1 : 0));
    }
    OPAL_THREAD_UNLOCK(&module->main->lock);
    return rc;
}

/* finalize: ob1 is gone, so whatever still arrives is dropped */
static void discard_cb(void *ctx, uint32_t task, uint32_t window, uint8_t tag,
                       const uint8_t *data, size_t len)
{
    (void) ctx; (void) task; (void) window; (void) tag; (void) data; (void) len;
}

/* Push an endpoint's refused sends for up to timeout_ns; whatever is still
 * queued afterwards is completed with an error so nothing leaks. */
static void drain_endpoint(mca_btl_doorbell_module_t *module, mca_btl_doorbell_endpoint_t *ep,
                           uint64_t timeout_ns, bool deliver)
{
    uint64_t deadline = mca_btl_doorbell_now_ns() + timeout_ns;
    opal_list_t left;
    mca_btl_doorbell_frag_t *frag;

    while (ep->npending && !ep->lost && mca_btl_doorbell_now_ns() < deadline) {
        (void) mca_btl_doorbell_retry_pending(module);
        mca_btl_doorbell_idle_teach(module);
        (void) doorbell_progress(module->core, MCA_BTL_DOORBELL_WINDOW,
                                 deliver ? mca_btl_doorbell_recv_cb : discard_cb, module, NULL);
        (void) mca_btl_doorbell_drain_completed(module);
    }

    OBJ_CONSTRUCT(&left, opal_list_t);
    OPAL_THREAD_LOCK(&module->pending_lock);
    while (NULL != (frag = (mca_btl_doorbell_frag_t *) opal_list_remove_first(&ep->pending))) {
        ep->npending--;
        OPAL_THREAD_ADD_FETCH32(&module->npending, -1);
        opal_list_append(&left, (opal_list_item_t *) frag);
    }
    if (ep->on_pending_list) {
        opal_list_remove_item(&module->pending_endpoints, &ep->super);
        ep->on_pending_list = false;
    }
    OPAL_THREAD_UNLOCK(&module->pending_lock);

    while (NULL != (frag = (mca_btl_doorbell_frag_t *) opal_list_remove_first(&left))) {
        mca_btl_doorbell_frag_complete(module, frag, OPAL_ERR_UNREACH);
    }
    OBJ_DESTRUCT(&left);
}

int mca_btl_doorbell_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                               struct opal_proc_t **procs,
                               struct mca_btl_base_endpoint_t **endpoints)
{
    mca_btl_doorbell_module_t *module = ((mca_btl_doorbell_module_t *) btl)->main;

    (void) procs;
    for (size_t i = 0; i < nprocs; ++i) {
        mca_btl_doorbell_endpoint_t *ep = endpoints[i];
        if (NULL == ep) {
            continue;
        }
        drain_endpoint(module, ep, 5000000000ull, true);
        /* the struct stays in module->peers until finalize (verbose report) */
        ep->deleted = true;
    }
    return OPAL_SUCCESS;
}

static void report_counters(mca_btl_doorbell_module_t *module)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    doorbell_counters k;
    int rc;

    mca_btl_doorbell_idle_teach(module);
    memset(&k, 0, sizeof(k));
    rc = doorbell_counters_get(module->core, &k);
    if (DOORBELL_OK != rc) {
        opal_output(0, "btl doorbell: rank %u: counters unavailable: %s", module->my_task,
                    doorbell_error_string(rc));
        return;
    }
    opal_output_verbose(1, c->output,
                        "btl doorbell: rank %u counters: notifies_sent=%llu notifies_skipped=%llu "
                        "wakeups=%llu spurious_wakeups=%llu shm_sent=%llu (fast box %llu) shm_received=%llu "
                        "tcp_sent=%llu tcp_received=%llu shm_wakeups=%llu tcp_wakeups=%llu "
                        "peers_lost=%llu strangers_rejected=%llu sleeps=%llu sleep_timeouts=%llu polled_sleeps=%llu "
                        "stalls=%llu late_wakeups=%llu waits_past_inbound=%llu "
                        "sends_queued=%llu single_copy_reads=%llu single_copy_writes=%llu tcp_reads=%llu rma_ops=%llu "
                        "shm_atomics=%llu atomics_served=%llu",
                        module->my_task, (unsigned long long) k.notifies_sent,
                        (unsigned long long) k.notifies_skipped, (unsigned long long) k.wakeups,
                        (unsigned long long) k.spurious_wakeups, (unsigned long long) k.shm_sent,
                        (unsigned long long) k.shm_box_sent, (unsigned long long) k.shm_received, (unsigned long long) k.tcp_sent,
                        (unsigned long long) k.tcp_received, (unsigned long long) k.shm_wakeups,
                        (unsigned long long) k.tcp_wakeups, (unsigned long long) k.peers_lost,
                        (unsigned long long) k.strangers_rejected,
                        (unsigned long long) module->sleeps,
                        (unsigned long long) module->sleep_timeouts,
                        (unsigned long long) module->polled_sleeps,
                        (unsigned long long) module->stalls,
                        (unsigned long long) k.late_wakeups,
                        (unsigned long long) k.waits_past_inbound,
                        (unsigned long long) module->sends_queued,
                        (unsigned long long) module->single_copy_reads,
                        (unsigned long long) module->single_copy_writes,
                        (unsigned long long) module->tcp_reads,
                        (unsigned long long) module->rma_ops,
                        (unsigned long long) module->shm_atomics,
                        (unsigned long long) module->atomics_served);
    for (uint32_t p = DOORBELL_PATH_SHM; p <= DOORBELL_PATH_TCP; ++p) {
        doorbell_spin_stats l;
        if (DOORBELL_OK != doorbell_spin_stats_get(module->core, MCA_BTL_DOORBELL_WINDOW, p, &l)) {
            continue;
        }
        opal_output_verbose(1, c->output,
                            "btl doorbell: rank %u adaptive spin on %s: spins_paid=%llu "
                            "spins_vain=%llu probes=%llu now=%s",
                            module->my_task, mca_btl_doorbell_path_name((int) p),
                            (unsigned long long) l.spins_paid, (unsigned long long) l.spins_vain,
                            (unsigned long long) l.probes, l.short_spin ? "sleep-at-once" : "spin");
    }

    for (uint32_t t = 0; t < module->npeers_alloc; ++t) {
        mca_btl_doorbell_endpoint_t *ep = module->peers[t];
        int path;

        if (NULL == ep) {
            continue;
        }
        path = doorbell_peer_path(module->core, t);
        opal_output_verbose(1, c->output, "btl doorbell: rank %u peer %u path=%s%s",
                            module->my_task, t,
                            mca_btl_doorbell_path_name(path > 0 ? path : ep->path),
                            ep->lost ? " (lost)" : "");
    }
}

/* The state every module has of its own (init_frag_list and module_init). */
static void destruct_module_lists(mca_btl_doorbell_module_t *module)
{
    OBJ_DESTRUCT(&module->deferred_lock);
    OBJ_DESTRUCT(&module->pending_endpoints);
    OBJ_DESTRUCT(&module->pending_lock);
    OBJ_DESTRUCT(&module->completed);
    OBJ_DESTRUCT(&module->completed_lock);
    OBJ_DESTRUCT(&module->lock);
    OBJ_DESTRUCT(&module->max_frags);
    OBJ_DESTRUCT(&module->eager_frags);
}

int mca_btl_doorbell_finalize(struct mca_btl_base_module_t *btl)
{
    mca_btl_doorbell_module_t *module = (mca_btl_doorbell_module_t *) btl;
    mca_btl_doorbell_module_t *tcp = &mca_btl_doorbell_tcp_module;
    int rc;

    /* The TCP module's fragments may still sit in the shared pending lists:
     * the shm module finalizes both, whichever bml finalizes first. */
    if (module != module->main || NULL == module->core) {
        return OPAL_SUCCESS;
    }
    module->finalizing = true;
    /* progress must not run against a destroyed core */
    mca_btl_doorbell_component.module = NULL;

    for (uint32_t t = 0; t < module->npeers_alloc; ++t) {
        if (NULL != module->peers[t]) {
            drain_endpoint(module, module->peers[t], 5000000000ull, false);
        }
    }
    (void) mca_btl_doorbell_deferred_gets_run(module);
    (void) mca_btl_doorbell_drain_completed(module);

    rc = doorbell_flush(module->core, 5000000);
    if (DOORBELL_OK != rc) {
        opal_output_verbose(1, mca_btl_doorbell_component.output,
                            "btl doorbell: rank %u: flush at finalize: %s", module->my_task,
                            doorbell_error_string(rc));
    }

    if (mca_btl_doorbell_component.verbose >= 1) {
        report_counters(module);
    }

    /* unlinks every shared-memory file this rank created */
    rc = doorbell_endpoint_destroy(module->core);
    if (DOORBELL_OK != rc) {
        opal_output(0, "btl doorbell: rank %u: endpoint destroy: %s", module->my_task,
                    doorbell_error_string(rc));
    }
    module->core = NULL;

    for (uint32_t t = 0; t < module->npeers_alloc; ++t) {
        if (NULL != module->peers[t]) {
            OBJ_RELEASE(module->peers[t]);
        }
    }
    free(module->peers);
    module->peers = NULL;
    module->npeers_alloc = 0;

    destruct_module_lists(module);
    if (tcp->main == module) {
        tcp->main = NULL;
        tcp->core = NULL;
        destruct_module_lists(tcp);
    }
    return OPAL_SUCCESS;
}

/* The end of a peer: `why` says what happened (it completes "rank R lost
 * contact with rank T: ..."); the job is aborted.  `loss`: the peer's
 * process ended, which is no error once finalize began. */
static void peer_failed(mca_btl_doorbell_module_t *module, uint32_t task, bool loss, const char *why)
{
    mca_btl_doorbell_endpoint_t *ep = task < module->npeers_alloc ? module->peers[task] : NULL;
    char msg[320], lost[96];

    if (NULL != ep) {
        if (ep->lost) {
            return;
        }
        ep->lost = true;
    }

    /* After MPI_Finalize's barrier peers exit whenever they like. */
    if (loss && (module->finalizing || mca_btl_doorbell_mpi_finalizing())) {
        opal_output_verbose(10, mca_btl_doorbell_component.output,
                            "btl doorbell: rank %u: peer %u left during finalize", module->my_task,
                            task);
        return;
    }
    /* A rank announced an abort (the component's orte_ess.abort hook): the
     * runtime is killing the job, this rank too, and the peer went with
     * it.  Not a crash: nothing to report. */
    if (NULL != module->core && doorbell_abort_announced(module->core) > 0) {
        opal_output_verbose(10, mca_btl_doorbell_component.output,
                            "btl doorbell: rank %u: peer %u ended with the job's abort",
                            module->my_task, task);
        return;
    }

    /* a rank of this job by its rank; another job's (spawned, connected)
     * by its process name, since its peer id means nothing to the user */
    if (NULL != ep && ep->proc->proc_name.jobid != OPAL_PROC_MY_NAME.jobid) {
        snprintf(lost, sizeof(lost), "process %s of another job", OPAL_NAME_PRINT(ep->proc->proc_name));
    } else {
        snprintf(lost, sizeof(lost), "rank %u", task);
    }
    snprintf(msg, sizeof(msg), "btl doorbell: rank %u lost peer %s (%s)", module->my_task, lost, why);
    mca_btl_doorbell_show_help(false, "peer-lost",
                               "rank %u lost contact with %s on host %s: %s",
                               module->my_task, lost,
                               opal_process_info.nodename ? opal_process_info.nodename : "?",
                               why);
    /* The abort below skips btl_finalize, so this rank's segments would stay
     * in /dev/shm (peers reap the files only of ranks that die before them).
     * Destroy now -- unless other threads may be inside the core.  The
     * abort is announced first: the other ranks stay quiet about the
     * losses it brings, and the destroy waits for nobody. */
    if (!opal_using_threads() && NULL != module->core) {
        doorbell_endpoint *core = module->core;
        mca_btl_doorbell_component.module = NULL;
        module->core = NULL;
        (void) doorbell_announce_abort(core);
        (void) doorbell_endpoint_destroy(core);
    }
    {
        /* ob1's handler aborts the job through the runtime; it expects the
         * module that reached the peer */
        mca_btl_doorbell_module_t *owner = NULL != ep ? ep->module : module;
        mca_btl_base_module_error_cb_fn_t cb = NULL != owner->error_cb ? owner->error_cb : module->error_cb;
        if (NULL != cb) {
            cb(&owner->super, MCA_BTL_ERROR_FLAGS_FATAL, NULL != ep ? ep->proc : NULL, msg);
        }
    }
    /* no handler, or it returned: a rank that lost a peer cannot go on */
    opal_output(0, "%s; exiting", msg);
    exit(1);
}

void mca_btl_doorbell_peer_lost(mca_btl_doorbell_module_t *module, uint32_t task)
{
    peer_failed(module, task, true, "the peer process exited or was killed; aborting the job");
}

void mca_btl_doorbell_peer_corrupt(mca_btl_doorbell_module_t *module, uint32_t task, int rc)
{
    char why[256];

    snprintf(why, sizeof(why), "%s (%d); aborting the job", doorbell_error_string(rc), rc);
    peer_failed(module, task, false, why);
}

/* ------------------------------------------------------------------ */
/* descriptors                                                         */

mca_btl_base_descriptor_t *mca_btl_doorbell_alloc(struct mca_btl_base_module_t *btl,
                                                  struct mca_btl_base_endpoint_t *endpoint,
                                                  uint8_t order, size_t size, uint32_t flags)
{
    mca_btl_doorbell_frag_t *frag;

    frag = mca_btl_doorbell_frag_get((mca_btl_doorbell_module_t *) btl, size);
    if (OPAL_UNLIKELY(NULL == frag)) {
        return NULL;
    }
    frag->endpoint = endpoint;
    frag->base.des_flags = flags;
    frag->base.order = order;
    return &frag->base;
}

int mca_btl_doorbell_free(struct mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    (void) btl;
    mca_btl_doorbell_frag_return((mca_btl_doorbell_frag_t *) des);
    return OPAL_SUCCESS;
}

mca_btl_base_descriptor_t *mca_btl_doorbell_prepare_src(struct mca_btl_base_module_t *btl,
                                                        struct mca_btl_base_endpoint_t *endpoint,
                                                        struct opal_convertor_t *convertor,
                                                        uint8_t order, size_t reserve,
                                                        size_t *size, uint32_t flags)
{
    mca_btl_doorbell_module_t *module = (mca_btl_doorbell_module_t *) btl;
    mca_btl_doorbell_frag_t *frag;
    struct iovec iov;
    uint32_t iov_count = 1;
    size_t max_data = *size;
    int rc;

    if (reserve + max_data > module->max_frag_size) {
        if (reserve >= module->max_frag_size) {
            return NULL;
        }
        max_data = module->max_frag_size - reserve;
    }

    if (opal_convertor_need_buffers(convertor)) {
        /* non-contiguous: pack into the fragment's own buffer */
        frag = mca_btl_doorbell_frag_get(module, reserve + max_data);
        if (OPAL_UNLIKELY(NULL == frag)) {
            return NULL;
        }
        iov.iov_base = (IOVBASE_TYPE *) (frag->buf + reserve);
        iov.iov_len = max_data;
        rc = opal_convertor_pack(convertor, &iov, &iov_count, &max_data);
        if (OPAL_UNLIKELY(rc < 0)) {
            mca_btl_doorbell_frag_return(frag);
            return NULL;
        }
        frag->segments[0].seg_len = reserve + max_data;
    } else {
        /* contiguous: header in segment 0, user data by reference in
         * segment 1; packing with a NULL base returns the user pointer and
         * advances the convertor */
        frag = mca_btl_doorbell_frag_get(module, reserve);
        if (OPAL_UNLIKELY(NULL == frag)) {
            return NULL;
        }
        iov.iov_base = NULL;
        iov.iov_len = max_data;
        rc = opal_convertor_pack(convertor, &iov, &iov_count, &max_data);
        if (OPAL_UNLIKELY(rc < 0)) {
            mca_btl_doorbell_frag_return(frag);
            return NULL;
        }
        frag->segments[0].seg_len = reserve;
        if (max_data > 0) {
            frag->segments[1].seg_addr.pval = iov.iov_base;
            frag->segments[1].seg_len = max_data;
            frag->base.des_segment_count = 2;
        }
    }

    *size = max_data;
    frag->endpoint = endpoint;
    frag->base.des_flags = flags;
    frag->base.order = order;
    return &frag->base;
}
