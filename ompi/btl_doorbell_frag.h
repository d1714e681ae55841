/* btl_doorbell_frag.h -- send descriptors handed to and from ob1.
 *
 * A fragment is a descriptor plus a buffer that follows it in the same
 * free-list element.  Segment 0 always points into that buffer (header,
 * and the payload when it was copied); segment 1, when present, points
 * at the user's data (SEND_INPLACE), which the core copies at send time.
 */
#ifndef MCA_BTL_DOORBELL_FRAG_H
#define MCA_BTL_DOORBELL_FRAG_H

#include "opal_config.h"

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"

BEGIN_C_DECLS

typedef struct mca_btl_doorbell_frag_t {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segments[2];
    struct mca_btl_base_endpoint_t *endpoint;
    opal_free_list_t *my_list;
    size_t capacity;            /* bytes available at buf */
    mca_btl_base_tag_t tag;     /* kept while queued after WOULD_BLOCK */
    int status;                 /* result of a retried send, for completion */
    unsigned char *buf;
} mca_btl_doorbell_frag_t;

OBJ_CLASS_DECLARATION(mca_btl_doorbell_frag_t);

/* free-list item init: remembers the list and where the buffer starts */
int mca_btl_doorbell_frag_init(opal_free_list_item_t *item, void *ctx);

static inline mca_btl_doorbell_frag_t *
mca_btl_doorbell_frag_get(mca_btl_doorbell_module_t *module, size_t size)
{
    opal_free_list_t *list;
    mca_btl_doorbell_frag_t *frag;

    if (size <= module->eager_frag_size) {
        list = &module->eager_frags;
    } else if (size <= module->max_frag_size) {
        list = &module->max_frags;
    } else {
        return NULL;
    }

    frag = (mca_btl_doorbell_frag_t *) opal_free_list_get(list);
    if (OPAL_UNLIKELY(NULL == frag)) {
        return NULL;
    }
    frag->segments[0].seg_addr.pval = frag->buf;
    frag->segments[0].seg_len = size;
    frag->base.des_segments = frag->segments;
    frag->base.des_segment_count = 1;
    frag->base.des_cbfunc = NULL;
    frag->base.des_cbdata = NULL;
    frag->base.des_flags = 0;
    frag->endpoint = NULL;
    return frag;
}

static inline void mca_btl_doorbell_frag_return(mca_btl_doorbell_frag_t *frag)
{
    opal_free_list_return(frag->my_list, &frag->base.super);
}

/* Local completion: callback if the owner asked, then give the descriptor
 * back if the BTL owns it.  Flags are read first: the callback may free.
 * Once btl_finalize runs, the PML that owns the callbacks is closed (its
 * .so unloaded): the descriptors only go back. */
static inline void mca_btl_doorbell_frag_complete(mca_btl_doorbell_module_t *module,
                                                  mca_btl_doorbell_frag_t *frag, int status)
{
    uint32_t flags = frag->base.des_flags;

    if ((flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) && NULL != frag->base.des_cbfunc &&
        !module->main->finalizing) {
        /* ob1 expects the module the descriptor was sent on */
        mca_btl_doorbell_module_t *sent_on = NULL != frag->endpoint ? frag->endpoint->module : module;
        frag->base.des_cbfunc(&sent_on->super, frag->endpoint, &frag->base, status);
    }
    if (flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) {
        mca_btl_doorbell_frag_return(frag);
    }
}

END_C_DECLS

#endif /* MCA_BTL_DOORBELL_FRAG_H */
