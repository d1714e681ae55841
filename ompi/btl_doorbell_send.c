/* btl_doorbell_send.c -- send, sendi, and the queues of sends the core
 * refused (retried from progress) and of completions (run from progress).
 *
 * Send completion.  doorbell_send* returns once the core has copied the
 * bytes (ring, socket or the peer's backlog), so every send completes
 * inline.  Following the BTL contract:
 *   - without MCA_BTL_DES_SEND_ALWAYS_CALLBACK: release the descriptor if
 *     the BTL owns it and return 1 ("completed inline, no callback");
 *   - with it: queue the descriptor and run the callback from the next
 *     progress call, and return OPAL_SUCCESS.  Calling ob1 back from inside
 *     btl_send re-enters its scheduler with half-updated counters, and the
 *     callbacks are also what restarts ob1's pending queues (open-mpi/ompi
 *     #3845), so they must happen.
 * When the core refuses with WOULD_BLOCK, the descriptor is queued on its
 * endpoint and retried from progress; sendi instead returns
 * OPAL_ERR_OUT_OF_RESOURCE (and a descriptor, so ob1 falls back to send).
 */
#include "opal_config.h"

#include <string.h>

#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"
#include "btl_doorbell_frag.h"

/* ------------------------------------------------------------------ */
/* sending                                                             */

static inline int core_to_opal(int rc)
{
    switch (rc) {
    case DOORBELL_ERR_WOULD_BLOCK:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case DOORBELL_ERR_UNKNOWN_TASK:
    case DOORBELL_ERR_PEER_LOST:
    case DOORBELL_ERR_NETWORK:
        return OPAL_ERR_UNREACH;
    case DOORBELL_ERR_BAD_LENGTH:
    case DOORBELL_ERR_INVALID_ARGUMENT:
        return OPAL_ERR_BAD_PARAM;
    default:
        return OPAL_ERROR;
    }
}

/* After every successful send: with threads, ring our own doorbell (no
 * syscall unless another thread of this rank sleeps in progress: then it
 * wakes and sees the completion; a single-threaded rank has no such
 * thread, so it skips the call), and mark activity so the adaptive mode
 * keeps spinning for spin_us -- a reply usually follows a send. */
static inline void after_send(mca_btl_doorbell_module_t *module)
{
    if (opal_using_threads()) {
        (void) doorbell_local_notify(module->core, module->my_task, MCA_BTL_DOORBELL_WINDOW);
    }
    module->send_activity = 1;
}

static inline int frag_sendv(mca_btl_doorbell_module_t *module, mca_btl_doorbell_frag_t *frag,
                             uint32_t task, mca_btl_base_tag_t tag)
{
    doorbell_iovec iov[2];
    size_t n = frag->base.des_segment_count;

    for (size_t i = 0; i < n; ++i) {
        iov[i].base = frag->segments[i].seg_addr.pval;
        iov[i].len = (size_t) frag->segments[i].seg_len;
    }
    return doorbell_sendv(module->core, task, MCA_BTL_DOORBELL_WINDOW, tag, iov, n);
}

static void queue_completed(mca_btl_doorbell_module_t *module, mca_btl_doorbell_frag_t *frag)
{
    OPAL_THREAD_LOCK(&module->completed_lock);
    opal_list_append(&module->completed, (opal_list_item_t *) frag);
    OPAL_THREAD_UNLOCK(&module->completed_lock);
    OPAL_THREAD_ADD_FETCH32(&module->ncompleted, 1);
}

/* Caller holds module->pending_lock. */
static void queue_pending_locked(mca_btl_doorbell_module_t *module,
                                 mca_btl_doorbell_endpoint_t *ep, mca_btl_doorbell_frag_t *frag,
                                 mca_btl_base_tag_t tag)
{
    frag->tag = tag;
    /* ob1 must now wait for the callback: we return OPAL_SUCCESS, not 1 */
    frag->base.des_flags |= MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
    opal_list_append(&ep->pending, (opal_list_item_t *) frag);
    ep->npending++;
    OPAL_THREAD_ADD_FETCH32(&module->npending, 1);
    module->sends_queued++;
    if (!ep->on_pending_list) {
        ep->on_pending_list = true;
        opal_list_append(&module->pending_endpoints, &ep->super);
    }
}

int mca_btl_doorbell_send(struct mca_btl_base_module_t *btl,
                          struct mca_btl_base_endpoint_t *endpoint,
                          struct mca_btl_base_descriptor_t *descriptor, mca_btl_base_tag_t tag)
{
    /* pending and completed sends are shared by both modules */
    mca_btl_doorbell_module_t *module = ((mca_btl_doorbell_module_t *) btl)->main;
    mca_btl_doorbell_frag_t *frag = (mca_btl_doorbell_frag_t *) descriptor;
    int rc;

    if (OPAL_UNLIKELY(endpoint->lost)) {
        return OPAL_ERR_UNREACH;
    }
    frag->endpoint = endpoint;

    /* keep order behind sends the core refused earlier */
    if (OPAL_UNLIKELY(endpoint->npending)) {
        OPAL_THREAD_LOCK(&module->pending_lock);
        if (endpoint->npending) {
            queue_pending_locked(module, endpoint, frag, tag);
            OPAL_THREAD_UNLOCK(&module->pending_lock);
            return OPAL_SUCCESS;
        }
        OPAL_THREAD_UNLOCK(&module->pending_lock);
    }

    rc = frag_sendv(module, frag, endpoint->task, tag);
    if (OPAL_LIKELY(DOORBELL_OK == rc)) {
        after_send(module);
        if (frag->base.des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) {
            queue_completed(module, frag);
            return OPAL_SUCCESS;
        }
        if (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) {
            mca_btl_doorbell_frag_return(frag);
        }
        return 1;
    }

    if (DOORBELL_ERR_WOULD_BLOCK == rc) {
        OPAL_THREAD_LOCK(&module->pending_lock);
        queue_pending_locked(module, endpoint, frag, tag);
        OPAL_THREAD_UNLOCK(&module->pending_lock);
        return OPAL_SUCCESS;
    }

    if (mca_btl_doorbell_is_corrupt(rc)) {
        mca_btl_doorbell_peer_corrupt(module, endpoint->task, rc);
    }
    opal_output_verbose(1, mca_btl_doorbell_component.output,
                        "btl doorbell: send to task %u failed: %s (%d)", endpoint->task,
                        doorbell_error_string(rc), rc);
    return core_to_opal(rc);
}

int mca_btl_doorbell_sendi(struct mca_btl_base_module_t *btl,
                           struct mca_btl_base_endpoint_t *endpoint,
                           struct opal_convertor_t *convertor, void *header, size_t header_size,
                           size_t payload_size, uint8_t order, uint32_t flags,
                           mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor)
{
    /* fragments come from this module's lists, sized for its limits */
    mca_btl_doorbell_module_t *own = (mca_btl_doorbell_module_t *) btl;
    mca_btl_doorbell_module_t *module = own->main;
    mca_btl_doorbell_frag_t *frag = NULL;
    int rc;

    if (OPAL_UNLIKELY(endpoint->lost)) {
        if (descriptor) {
            *descriptor = NULL;
        }
        return OPAL_ERR_UNREACH;
    }
    if (OPAL_UNLIKELY(endpoint->npending)) {
        rc = DOORBELL_ERR_WOULD_BLOCK;
        goto refused;
    }

    if (0 == payload_size || !opal_convertor_need_buffers(convertor)) {
        /* header and user data go straight to the core, which copies both */
        void *data = NULL;

        if (payload_size) {
            opal_convertor_get_current_pointer(convertor, &data);
        }
        rc = doorbell_send2(module->core, endpoint->task, MCA_BTL_DOORBELL_WINDOW, tag, header,
                            header_size, data, payload_size);
    } else {
        /* non-contiguous: pack header + payload into a fragment first */
        struct iovec iov;
        uint32_t iov_count = 1;
        size_t max_data = payload_size;

        frag = mca_btl_doorbell_frag_get(own, header_size + payload_size);
        if (OPAL_UNLIKELY(NULL == frag)) {
            if (descriptor) {
                *descriptor = NULL;
            }
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        memcpy(frag->buf, header, header_size);
        iov.iov_base = (IOVBASE_TYPE *) (frag->buf + header_size);
        iov.iov_len = payload_size;
        rc = opal_convertor_pack(convertor, &iov, &iov_count, &max_data);
        if (OPAL_UNLIKELY(rc < 0)) {
            mca_btl_doorbell_frag_return(frag);
            if (descriptor) {
                *descriptor = NULL;
            }
            return OPAL_ERROR;
        }
        frag->segments[0].seg_len = header_size + max_data;
        rc = doorbell_send(module->core, endpoint->task, MCA_BTL_DOORBELL_WINDOW, tag, frag->buf,
                           header_size + max_data);
    }

    if (OPAL_LIKELY(DOORBELL_OK == rc)) {
        after_send(module);
        if (NULL != frag) {
            mca_btl_doorbell_frag_return(frag);
        }
        return OPAL_SUCCESS;
    }

refused:
    if (DOORBELL_ERR_WOULD_BLOCK == rc) {
        /* Hand ob1 a descriptor big enough for header + payload; it packs
         * into it (resetting its convertor) and calls btl_send, which
         * queues behind the refused sends. */
        if (descriptor) {
            if (NULL == frag) {
                frag = mca_btl_doorbell_frag_get(own, header_size + payload_size);
            }
            if (NULL != frag) {
                frag->segments[0].seg_len = header_size + payload_size;
                frag->base.des_segment_count = 1;
                frag->endpoint = endpoint;
                frag->base.des_flags = flags;
                frag->base.order = order;
            }
            *descriptor = NULL != frag ? &frag->base : NULL;
        } else if (NULL != frag) {
            mca_btl_doorbell_frag_return(frag);
        }
        return OPAL_ERR_OUT_OF_RESOURCE;
    }

    if (NULL != frag) {
        mca_btl_doorbell_frag_return(frag);
    }
    if (descriptor) {
        *descriptor = NULL;
    }
    if (mca_btl_doorbell_is_corrupt(rc)) {
        mca_btl_doorbell_peer_corrupt(module, endpoint->task, rc);
    }
    opal_output_verbose(1, mca_btl_doorbell_component.output,
                        "btl doorbell: sendi to task %u failed: %s (%d)", endpoint->task,
                        doorbell_error_string(rc), rc);
    return core_to_opal(rc);
}

/* ------------------------------------------------------------------ */
/* called from progress                                                */

int mca_btl_doorbell_drain_completed(mca_btl_doorbell_module_t *module)
{
    opal_list_t batch;
    mca_btl_doorbell_frag_t *frag;
    int n = 0;

    /* take the whole list at once: callbacks may send and queue more */
    OBJ_CONSTRUCT(&batch, opal_list_t);
    OPAL_THREAD_LOCK(&module->completed_lock);
    opal_list_join(&batch, opal_list_get_end(&batch), &module->completed);
    OPAL_THREAD_UNLOCK(&module->completed_lock);

    while (NULL != (frag = (mca_btl_doorbell_frag_t *) opal_list_remove_first(&batch))) {
        OPAL_THREAD_ADD_FETCH32(&module->ncompleted, -1);
        mca_btl_doorbell_frag_complete(module, frag, OPAL_SUCCESS);
        ++n;
    }
    OBJ_DESTRUCT(&batch);
    return n;
}

/* Retry refused sends, per endpoint in order, stopping at an endpoint's
 * first refusal.  Completions run after the lock is dropped: their
 * callbacks may send again. */
int mca_btl_doorbell_retry_pending(mca_btl_doorbell_module_t *module)
{
    mca_btl_doorbell_endpoint_t *ep, *next;
    mca_btl_doorbell_frag_t *frag;
    opal_list_t done;
    int n = 0;

    OBJ_CONSTRUCT(&done, opal_list_t);
    OPAL_THREAD_LOCK(&module->pending_lock);
    OPAL_LIST_FOREACH_SAFE(ep, next, &module->pending_endpoints, mca_btl_doorbell_endpoint_t) {
        while (NULL != (frag = (mca_btl_doorbell_frag_t *) opal_list_get_first(&ep->pending)) &&
               frag != (mca_btl_doorbell_frag_t *) opal_list_get_end(&ep->pending)) {
            int rc = frag_sendv(module, frag, ep->task, frag->tag);
            if (DOORBELL_ERR_WOULD_BLOCK == rc) {
                break;
            }
            opal_list_remove_item(&ep->pending, (opal_list_item_t *) frag);
            ep->npending--;
            OPAL_THREAD_ADD_FETCH32(&module->npending, -1);
            frag->status = rc;
            opal_list_append(&done, (opal_list_item_t *) frag);
        }
        if (0 == ep->npending) {
            opal_list_remove_item(&module->pending_endpoints, &ep->super);
            ep->on_pending_list = false;
        }
    }
    OPAL_THREAD_UNLOCK(&module->pending_lock);

    while (NULL != (frag = (mca_btl_doorbell_frag_t *) opal_list_remove_first(&done))) {
        if (DOORBELL_OK == frag->status) {
            after_send(module);
        } else {
            if (mca_btl_doorbell_is_corrupt(frag->status)) {
                mca_btl_doorbell_peer_corrupt(module, frag->endpoint->task, frag->status);
            }
            opal_output_verbose(1, mca_btl_doorbell_component.output,
                                "btl doorbell: queued send to task %u failed: %s (%d)",
                                frag->endpoint->task, doorbell_error_string(frag->status),
                                frag->status);
        }
        mca_btl_doorbell_frag_complete(module, frag,
                                       DOORBELL_OK == frag->status ? OPAL_SUCCESS
                                                                   : core_to_opal(frag->status));
        ++n;
    }
    OBJ_DESTRUCT(&done);
    return n;
}
