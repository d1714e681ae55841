/* btl_doorbell_idle.c -- where a rank decides to sleep: Open MPI's idle point.
 *
 * opal_progress() (Open MPI 4.1) runs every registered progress callback --
 * the BTLs', ob1's pending queues, osc pt2pt, libnbc, ... -- and, when the
 * sum of their events is 0 and opal_progress_yield_when_idle is set, calls
 * sched_yield().  That call is the one point where all of Open MPI has just
 * reported nothing to do.  A sleep inside our own progress callback is blind
 * to the callbacks that run after it, and held up their work by a whole
 * sleep (RMA over osc pt2pt 140x slower than vader).
 *
 * So the component sets the yield flag and points libopen-pal's PLT slot
 * for sched_yield at doorbell_idle_point() (btl_doorbell_got.c; what the
 * hooks patch: docs/ompi-hooks.md).  Both ways
 * of selecting doorbell (MCA and LD_PRELOAD) load this component, so both
 * get it.  At the idle point:
 *   - idle points of consecutive opal_progress passes, less than
 *     MCA_BTL_DOORBELL_BACK_TO_BACK_NS apart, form a *run*: someone waits.
 *     A pass with any event, or a gap (compute between MPI_Test calls),
 *     ends the run, so a test-and-compute loop is never put to sleep;
 *   - block mode sleeps at the second idle point of a run, adaptive once
 *     the run is older than its spin budget, poll never.  The budget comes
 *     from the core's spin/sleep learner (doorbell_spin_next), which
 *     learns per path (shm, tcp) whether spinning pays; each run that
 *     spun and ended in work tells it how: while it spun, or after a
 *     sleep.  It tells it later, so the call is not between the message
 *     and the return of the MPI call that waited for it: with the next
 *     run's doorbell_spin_next (one call per wait), or with
 *     doorbell_spin_end before a delivery that comes first
 *     (mca_btl_doorbell_idle_teach);
 *   - when it does not sleep it calls sched_yield only if Open MPI itself
 *     asked for yields (mpi_yield_when_idle, which mpirun sets for
 *     oversubscribed jobs), so a spinning rank gives its core away exactly
 *     when vader's would.
 * Sleeps start at 1 ms and double while nothing at all happens, up to
 * sleep_max_us (1 s).  What may have work that rings no bell, and so keeps
 * the bound at sleep_poll_us (16 ms) while it is there (poll_bound):
 *   - a progress callback registered with opal_progress that is not the
 *     BTLs', libnbc's or osc pt2pt's (their work arrives as messages that
 *     ring, or completes in the pass that reports it): ob1's pending sends,
 *     communicator requests, MPI-IO, extended generalized requests.  The
 *     register and unregister calls of libmpi and the components go
 *     through wrappers that keep the count;
 *   - an event on opal's own event base (opal_sync_event_base, run by
 *     opal_progress): none in a self,doorbell job (PMIx and ORTE run their
 *     own threads and event bases), but a timer or socket there rings
 *     nothing.
 * PMIx and ORTE hand results to this thread only through flags polled in
 * calls that never sleep here (MPI_Init, MPI_Finalize, spawn and connect
 * are not blocking calls below); other threads ring the bell (sends,
 * pthread_cond_signal); a peer's exit rings through its pidfd.
 *
 * Other threads.  Under MPI_THREAD_MULTIPLE, a request that another thread
 * completes (through btl self, or its own progress) is signalled with
 * pthread_cond_signal (opal's wait_sync).  Those PLT slots of Open MPI's
 * libraries and components are redirected too: after signalling, they ring
 * this rank's own doorbell.  The doorbell is sticky, so a thread that
 * sleeps, or is about to, wakes at once.  Sends by other threads ring it
 * already (after_send in btl_doorbell_send.c).
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "opal/mca/event/event.h"
#include "opal/runtime/opal_progress.h"
#include "ompi/runtime/mpiruntime.h"

#include "btl_doorbell.h"
#include "btl_doorbell_blocking.h"
#include "btl_doorbell_got.h"
#include "btl_doorbell_osc_fix.h"

/* libmpi defines these; weak so the component still loads without it. */
#pragma weak ompi_mpi_state
extern bool ompi_mpi_yield_when_idle __attribute__((weak));

#define CLOCK_EVERY 8

static bool idle_hooked;        /* sched_yield of libopen-pal is ours */
static bool late_hooks_done;    /* second pass over components loaded after init */

static int doorbell_idle_point(void);
static int doorbell_cond_signal(pthread_cond_t *cond);

static bool ompi_wants_yield(void)
{
    return &ompi_mpi_yield_when_idle != NULL && ompi_mpi_yield_when_idle;
}

static bool mpi_running(void)
{
    return &ompi_mpi_state == NULL || OMPI_MPI_STATE_INIT_COMPLETED == ompi_mpi_state;
}

static bool is_open_pal(const char *path)
{
    return NULL != strstr(path, "libopen-pal.so");
}

/* Where Open MPI completes requests and hands the progress on: libmpi,
 * libopen-pal (wait_sync) and the pml, osc, coll and btl components -- not
 * this one, and not the runtime's (ORTE, PMIx), whose own threads signal
 * conditions and may still run while this component is unloaded. */
static bool is_open_mpi(const char *path)
{
    static const char *const parts[] = {"libmpi.so", "libopen-pal.so", "/mca_pml_", "/mca_osc_",
                                        "/mca_coll_", "/mca_btl_", "/mca_part_"};
    if (NULL != strstr(path, "mca_btl_doorbell")) {
        return false;
    }
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); ++i) {
        if (NULL != strstr(path, parts[i])) {
            return true;
        }
    }
    return false;
}

/* Idempotent: slots already redirected are skipped, so a second call only
 * reaches libraries loaded since the first. */
static void redirect_cond_signal(void)
{
    (void) mca_btl_doorbell_got_redirect("pthread_cond_signal", (void *) doorbell_cond_signal,
                                         is_open_mpi);
}

/* ------------------------------------------------------------------ */
/* what needs progress calls that no bell announces                    */

#define MAX_TRACKED 32

static pthread_mutex_t tracked_lock = PTHREAD_MUTEX_INITIALIZER;
static opal_progress_callback_t tracked[MAX_TRACKED];
static int ntracked;
static volatile int32_t polled_callbacks; /* registered now; > MAX_TRACKED only grows */

/* Work of these comes as messages over the BTLs (a bell rings), or
 * completes in the pass that reports it: the stall suites check libnbc's
 * and osc pt2pt's. */
static bool rings_a_bell(opal_progress_callback_t cb)
{
    static const char *const quiet[] = {"/mca_btl_", "/mca_coll_libnbc", "/mca_osc_pt2pt"};
    Dl_info info;

    if (0 == dladdr((void *) cb, &info) || NULL == info.dli_fname) {
        return false;
    }
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); ++i) {
        if (NULL != strstr(info.dli_fname, quiet[i])) {
            return true;
        }
    }
    return false;
}

static void note_registered(opal_progress_callback_t cb)
{
    bool rings = rings_a_bell(cb);
    Dl_info info;

    if (mca_btl_doorbell_component.verbose >= 2 && 0 != dladdr((void *) cb, &info)) {
        opal_output(0, "btl doorbell: progress callback %p of %s registered%s", (void *) cb,
                    info.dli_fname ? info.dli_fname : "?",
                    rings ? "" : ": sleeps at most sleep_poll_us while it is");
    }
    if (rings) {
        return;
    }
    pthread_mutex_lock(&tracked_lock);
    int i = 0;
    while (i < ntracked && tracked[i] != cb) {
        ++i;
    }
    if (i == ntracked) { /* opal keeps one registration per callback too */
        if (ntracked < MAX_TRACKED) {
            tracked[ntracked++] = cb;
        }
        /* past the table: counted, never uncounted (the bound stays short) */
        opal_atomic_add_fetch_32(&polled_callbacks, 1);
    }
    pthread_mutex_unlock(&tracked_lock);
}

static void note_unregistered(opal_progress_callback_t cb)
{
    pthread_mutex_lock(&tracked_lock);
    for (int i = 0; i < ntracked; ++i) {
        if (tracked[i] == cb) {
            tracked[i] = tracked[--ntracked];
            opal_atomic_add_fetch_32(&polled_callbacks, -1);
            break;
        }
    }
    pthread_mutex_unlock(&tracked_lock);
}

static int doorbell_progress_register(opal_progress_callback_t cb)
{
    int rc = opal_progress_register(cb);
    if (OPAL_SUCCESS == rc) {
        note_registered(cb);
    }
    return rc;
}

static int doorbell_progress_register_lp(opal_progress_callback_t cb)
{
    int rc = opal_progress_register_lp(cb);
    if (OPAL_SUCCESS == rc) {
        note_registered(cb);
    }
    return rc;
}

static int doorbell_progress_unregister(opal_progress_callback_t cb)
{
    int rc = opal_progress_unregister(cb);
    if (OPAL_SUCCESS == rc) {
        note_unregistered(cb);
    }
    return rc;
}

/* Who registers progress callbacks: libmpi and the components (and their
 * common libraries), not this one. */
static bool registers_progress(const char *path)
{
    if (NULL != strstr(path, "mca_btl_doorbell")) {
        return false;
    }
    return NULL != strstr(path, "libmpi.so") || NULL != strstr(path, "/mca_") ||
           NULL != strstr(path, "/libmca_common_");
}

/* Idempotent, as redirect_cond_signal; called with redirect_lock held. */
static void redirect_progress_register(void)
{
    (void) mca_btl_doorbell_got_redirect("opal_progress_register",
                                         (void *) doorbell_progress_register, registers_progress);
    (void) mca_btl_doorbell_got_redirect("opal_progress_register_lp",
                                         (void *) doorbell_progress_register_lp,
                                         registers_progress);
    (void) mca_btl_doorbell_got_redirect("opal_progress_unregister",
                                         (void *) doorbell_progress_unregister,
                                         registers_progress);
}

static pthread_mutex_t redirect_lock = PTHREAD_MUTEX_INITIALIZER;

/* Replaces dlopen in libopen-pal, which loads Open MPI's components: a
 * component's PLT slots are ours before it can register a callback (ob1,
 * coll and osc load after this BTL starts, the io components at the first
 * MPI_File_open). */
static void *doorbell_dlopen(const char *file, int mode)
{
    void *h = dlopen(file, mode);

    if (NULL != h) {
        pthread_mutex_lock(&redirect_lock);
        if (idle_hooked) {
            redirect_progress_register();
        }
        pthread_mutex_unlock(&redirect_lock);
        mca_btl_doorbell_osc_fix_loaded(h);
    }
    return h;
}

void mca_btl_doorbell_dlopen_install(void)
{
    pthread_mutex_lock(&redirect_lock);
    (void) mca_btl_doorbell_got_redirect("dlopen", (void *) doorbell_dlopen, is_open_pal);
    pthread_mutex_unlock(&redirect_lock);
}

/* libevent 2.1's, looked up at run time: an Open MPI built with its own
 * libevent (2.0, renamed symbols) has none, and then the event base
 * counts as busy. */
typedef int (*foreach_event_fn)(struct event_base *, event_base_foreach_event_cb, void *);
typedef event_callback_fn (*event_callback_get_fn)(const struct event *);
static foreach_event_fn base_foreach_event;
static event_callback_get_fn event_callback_get;

/* Libevent adds events of its own (the notify pipe of a threaded base):
 * those are its code's callbacks. */
static int count_foreign_event(const struct event_base *base, const struct event *ev, void *arg)
{
    static void *libevent_own; /* the last callback found to be libevent's */
    void *cb = (void *) event_callback_get(ev);
    Dl_info info;

    (void) base;
    if (cb == __atomic_load_n(&libevent_own, __ATOMIC_RELAXED)) {
        return 0;
    }
    if (0 != dladdr(cb, &info) && NULL != info.dli_fname &&
        NULL != strstr(info.dli_fname, "libevent")) {
        __atomic_store_n(&libevent_own, cb, __ATOMIC_RELAXED);
        return 0;
    }
    *(int *) arg = 1;
    return 1; /* one is enough */
}

static bool event_base_busy(void)
{
    int found = 0;

    if (NULL == opal_sync_event_base) {
        return false;
    }
    if (NULL == base_foreach_event || NULL == event_callback_get) {
        return true;
    }
    (void) base_foreach_event(opal_sync_event_base, count_foreign_event, &found);
    return 0 != found;
}

/* May some part of Open MPI have work now that rings no bell? */
static bool poll_bound(void)
{
    return 0 != polled_callbacks || event_base_busy();
}

bool mca_btl_doorbell_idle_install(void)
{
    if (!idle_hooked) {
        idle_hooked = mca_btl_doorbell_got_redirect("sched_yield", (void *) doorbell_idle_point,
                                                    is_open_pal) > 0;
        if (idle_hooked) {
            /* before the blocking calls' wrappers, which may take many slots */
            pthread_mutex_lock(&redirect_lock);
            redirect_progress_register();
            pthread_mutex_unlock(&redirect_lock);
            mca_btl_doorbell_dlopen_install();
            (void) mca_btl_doorbell_blocking_install();
            base_foreach_event = (foreach_event_fn) dlsym(RTLD_DEFAULT, "event_base_foreach_event");
            event_callback_get = (event_callback_get_fn) dlsym(RTLD_DEFAULT, "event_get_callback");
        }
        redirect_cond_signal();
    }
    if (idle_hooked) {
        opal_progress_yield_when_idle = true;
    }
    return idle_hooked;
}

void mca_btl_doorbell_idle_uninstall(void)
{
    pthread_mutex_lock(&redirect_lock);
    mca_btl_doorbell_got_restore_all();
    if (idle_hooked) {
        opal_progress_yield_when_idle = ompi_wants_yield();
    }
    idle_hooked = false;
    pthread_mutex_unlock(&redirect_lock);
    late_hooks_done = false;
    pthread_mutex_lock(&tracked_lock);
    ntracked = 0;
    polled_callbacks = 0;
    pthread_mutex_unlock(&tracked_lock);
}

void mca_btl_doorbell_idle_reset(mca_btl_doorbell_module_t *module)
{
    module->progress_calls = 0;
    module->idle_mark = 0;
    module->last_idle_ns = 0;
    module->idle_since_ns = 0;
    module->run_serial = 0;
    module->run_passes = 0;
    module->spin_ns = 0;
    module->spin_lesson = 0;
    module->idle_sleeps = 0;
    module->paths_seen = 0;
}

/* ------------------------------------------------------------------ */
/* learning: the core's spin/sleep learner                             */

/* Oversubscribed, a spinning rank yields its core at every idle pass: the
 * spin costs the ranks that share the core little, and a sleeper's
 * wake-up would wait for a core, so the learner keeps spinning. */
static uint32_t spin_flags(void)
{
    return ompi_wants_yield() ? DOORBELL_SPIN_YIELDS : 0;
}

/* The run that spun ended as `how`: keep it for mca_btl_doorbell_idle_teach. */
static void keep_lesson(mca_btl_doorbell_module_t *m, uint32_t how, uint64_t waited_ns)
{
    m->spin_lesson = how;
    m->spin_lesson_ns = waited_ns;
    m->spin_lesson_flags = spin_flags();
}

/* The out-of-line part of mca_btl_doorbell_idle_teach. */
void mca_btl_doorbell_idle_tell(mca_btl_doorbell_module_t *m)
{
    (void) doorbell_spin_end(m->core, MCA_BTL_DOORBELL_WINDOW, m->spin_lesson, m->spin_lesson_ns,
                             m->spin_lesson_flags);
    m->spin_lesson = 0;
}

/* A new run of idle points: how long it spins before it sleeps.  The last
 * run's lesson, if still untold, goes with the same call. */
static void start_run(mca_btl_doorbell_module_t *m, uint64_t now)
{
    uint64_t spin_ns;

    m->idle_since_ns = now;
    if (DOORBELL_OK != doorbell_spin_next(m->core, MCA_BTL_DOORBELL_WINDOW, m->spin_lesson,
                                          m->spin_lesson_ns, m->spin_lesson_flags,
                                          (uint32_t) mca_btl_doorbell_component.wait_mode,
                                          &spin_ns)) {
        spin_ns = 0;
    }
    m->spin_lesson = 0;
    m->spin_ns = spin_ns;
}

/* What came right after a sleep that ran out unrung.  The blocking call
 * over at once (within STALL_PROMPT_NS of the sleep's end) with no message
 * of ours: what ended it (osc's flags in shared memory, btl self, another
 * thread) was there during the sleep without a ring, and the sleep held it
 * up for its whole length: a stall, which the stall tests count.  A
 * message of ours, or another sleep, clears it: the core judges its own
 * messages (late_wakeups), and a wait that sleeps on simply goes on. */
static inline void after_ran_out(mca_btl_doorbell_module_t *m, bool work)
{
    if (OPAL_UNLIKELY(m->ran_out)) {
        m->ran_out = false;
        if (work && mca_btl_doorbell_now_ns() - m->ran_out_ns < MCA_BTL_DOORBELL_STALL_PROMPT_NS) {
            m->stalls++;
        }
    }
}

void mca_btl_doorbell_idle_note_pass(mca_btl_doorbell_module_t *m, int events)
{
    m->progress_calls++;
    if (events > 0) {
        after_ran_out(m, false);
    }
    if (events > 0 && 0 != m->idle_since_ns) {
        /* a wait ended while the rank was awake: in its spin (or between
         * sleeps that timed out, then it spun in vain).  A run that did
         * not spin has nothing to teach.  The time is the clock as the
         * idle point last read it, at most CLOCK_EVERY passes (a few us)
         * ago against a budget of tens of us or more: reading it here
         * would sit between the message and the return of the MPI call
         * that waited for it. */
        if (m->spin_ns > 0) {
            keep_lesson(m, DOORBELL_SPIN_ENDED_AWAKE, m->last_idle_ns - m->idle_since_ns);
        }
        m->idle_since_ns = 0;
        m->idle_sleeps = 0;
    }
    /* ompi_mpi_init sets the flag from mpi_yield_when_idle near its end,
     * after this BTL started: set it again, or the idle point is never
     * reached. */
    if (OPAL_UNLIKELY(!opal_progress_yield_when_idle) && idle_hooked) {
        opal_progress_yield_when_idle = true;
    }
}

/* ------------------------------------------------------------------ */
/* sleeping                                                            */

static bool may_sleep(mca_btl_doorbell_module_t *m)
{
    if (m->finalizing || !mpi_running() || m->ncompleted || m->npending || m->ndeferred) {
        return false;
    }
    if (OPAL_UNLIKELY(!m->sleep_checked)) {
        mca_btl_doorbell_check_sleep_allowed(m);
    }
    return m->sleep_allowed;
}

static void sleep_once(mca_btl_doorbell_module_t *m)
{
    doorbell_wake wake = {0, 0};
    uint64_t sleep_us = (uint64_t) MCA_BTL_DOORBELL_FIRST_SLEEP_US << m->idle_sleeps;
    int rc;

    if (sleep_us > mca_btl_doorbell_component.sleep_max_us) {
        sleep_us = mca_btl_doorbell_component.sleep_max_us;
    }
    if (sleep_us > mca_btl_doorbell_component.sleep_poll_us && poll_bound()) {
        sleep_us = mca_btl_doorbell_component.sleep_poll_us;
        m->polled_sleeps++;
    }
    after_ran_out(m, false);
    mca_btl_doorbell_idle_teach(m); /* before the wait delivers anything */
    m->sleeps++;
    m->in_pass = 1;
    rc = doorbell_wait(m->core, MCA_BTL_DOORBELL_WINDOW, DOORBELL_WAIT_BLOCK, (int64_t) sleep_us,
                       mca_btl_doorbell_recv_cb, m, &wake);
    m->in_pass = 0;
    if (rc > 0) {
        if (m->spin_ns > 0) {
            /* it spun its whole budget in vain */
            keep_lesson(m, DOORBELL_SPIN_ENDED_WOKEN, 0);
        }
        m->idle_since_ns = 0; /* the run is over */
        m->idle_sleeps = 0;
    } else if (rc < 0) {
        mca_btl_doorbell_core_error(m, rc, &wake);
        m->idle_since_ns = 0;
    } else if (DOORBELL_WOKE_PEER_LOST == wake.reason) {
        mca_btl_doorbell_peer_lost(m, wake.task);
        m->idle_since_ns = 0;
    } else if (DOORBELL_WOKE_PEER_CLOSED == wake.reason) {
        /* a peer finalized in order (everything it sent came before):
         * nothing to do, and no reason to back off */
    } else if (DOORBELL_WOKE_TIMEOUT == wake.reason && m->nreads &&
               doorbell_reads_moved(m->core) > 0) {
        /* data of a read came during the sleep, each piece with its ring
         * (the core goes back to sleep until the read ends): activity, as
         * the next pass would count it (mca_btl_doorbell_reads_progress) */
        m->idle_since_ns = 0;
        m->idle_sleeps = 0;
    } else if (DOORBELL_WOKE_TIMEOUT == wake.reason) {
        /* nothing at all happened: back off; the run goes on */
        m->sleep_timeouts++;
        m->ran_out = true;
        m->ran_out_ns = mca_btl_doorbell_now_ns();
        if (m->idle_sleeps < 16) {
            m->idle_sleeps++;
        }
    } else {
        /* a notify: another thread sent or completed a request; let the
         * next pass do the work before any sleep */
        m->idle_since_ns = 0;
        m->idle_sleeps = 0;
    }
    m->last_idle_ns = mca_btl_doorbell_now_ns();
}

/* One idle point; true if it slept. */
static bool idle(mca_btl_doorbell_module_t *m)
{
    mca_btl_doorbell_component_t *c = &mca_btl_doorbell_component;
    bool slept = false;

    if (DOORBELL_WAIT_POLL == c->wait_mode) {
        return false;
    }
    if (opal_using_threads() && opal_atomic_swap_32(&m->progress_busy, 1)) {
        return false;
    }
    if (OPAL_UNLIKELY(!late_hooks_done) && mpi_running()) {
        /* components opened late in MPI_Init (osc, coll) */
        late_hooks_done = true;
        pthread_mutex_lock(&redirect_lock);
        redirect_cond_signal();
        pthread_mutex_unlock(&redirect_lock);
    }

    unsigned int depth;
    uint64_t serial;
    mca_btl_doorbell_blocking_state(&depth, &serial);
    if (0 == depth && mca_btl_doorbell_blocking_marked()) {
        /* not inside a blocking MPI call: MPI_Test, MPI_Iprobe, ... */
        after_ran_out(m, true);
        m->idle_since_ns = 0;
        opal_atomic_wmb();
        m->progress_busy = 0;
        return false;
    }

    /* In a marked blocking call a run is that call's idle passes, and the
     * clock is read only to start a run and, while it spins, every
     * CLOCK_EVERY passes (one read per pass was 5% of a TCP ping-pong). */
    bool marked = mca_btl_doorbell_blocking_marked();
    bool in_run = 0 != m->idle_since_ns && m->progress_calls - m->idle_mark <= 1 &&
                  (!marked || serial == m->run_serial);
    uint64_t now = 0;
    if (!marked || !in_run || (m->spin_ns > 0 && 0 == ++m->run_passes % CLOCK_EVERY)) {
        now = mca_btl_doorbell_now_ns();
        if (!marked && in_run && now - m->last_idle_ns >= MCA_BTL_DOORBELL_BACK_TO_BACK_NS) {
            in_run = false; /* unmarked: a gap means the caller computes */
        }
        m->last_idle_ns = now;
    }
    m->idle_mark = m->progress_calls;
    if (!in_run) {
        after_ran_out(m, true); /* the last blocking call ended with no event of ours */
        m->run_serial = serial;
        m->run_passes = 0;
        start_run(m, now);
    } else if ((0 == m->spin_ns || (0 != now && now - m->idle_since_ns >= m->spin_ns)) &&
               may_sleep(m)) {
        sleep_once(m);
        slept = true;
    }
    opal_atomic_wmb();
    m->progress_busy = 0;
    return slept;
}

/* Replaces sched_yield in libopen-pal: reached only from opal_progress,
 * after a pass in which every progress callback found nothing to do. */
static int doorbell_idle_point(void)
{
    mca_btl_doorbell_module_t *m = mca_btl_doorbell_component.module;

    if (OPAL_LIKELY(NULL != m && NULL != m->core) && idle(m)) {
        return 0;
    }
    return ompi_wants_yield() ? sched_yield() : 0;
}

/* Replaces pthread_cond_signal in Open MPI: a request completed (or a
 * thread was handed the progress) -- wake this rank's sleeper, if any. */
static int doorbell_cond_signal(pthread_cond_t *cond)
{
    int rc = pthread_cond_signal(cond);
    mca_btl_doorbell_module_t *m = mca_btl_doorbell_component.module;

    if (NULL != m && NULL != m->core && !m->finalizing) {
        (void) doorbell_local_notify(m->core, m->my_task, MCA_BTL_DOORBELL_WINDOW);
    }
    return rc;
}
