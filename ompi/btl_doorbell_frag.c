/* btl_doorbell_frag.c -- fragment class and free-list hook. */
#include "opal_config.h"

#include "btl_doorbell_frag.h"

static void mca_btl_doorbell_frag_construct(mca_btl_doorbell_frag_t *frag)
{
    frag->base.des_segments = frag->segments;
    frag->base.des_segment_count = 1;
    frag->endpoint = NULL;
    frag->my_list = NULL;
    frag->capacity = 0;
    frag->buf = NULL;
}

OBJ_CLASS_INSTANCE(mca_btl_doorbell_frag_t, mca_btl_base_descriptor_t,
                   mca_btl_doorbell_frag_construct, NULL);

/* The free list allocates sizeof(frag) + buffer bytes per element (payload
 * size 0, so no mpool is involved); the buffer starts right after the
 * struct.  ctx is the list, whose element size tells the capacity. */
int mca_btl_doorbell_frag_init(opal_free_list_item_t *item, void *ctx)
{
    mca_btl_doorbell_frag_t *frag = (mca_btl_doorbell_frag_t *) item;
    opal_free_list_t *list = (opal_free_list_t *) ctx;

    frag->my_list = list;
    frag->buf = (unsigned char *) (frag + 1);
    frag->capacity = list->fl_frag_size - sizeof(*frag);
    frag->segments[0].seg_addr.pval = frag->buf;
    return OPAL_SUCCESS;
}
