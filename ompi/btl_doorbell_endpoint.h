/* btl_doorbell_endpoint.h -- one per peer process; wraps a core peer id. */
#ifndef MCA_BTL_DOORBELL_ENDPOINT_H
#define MCA_BTL_DOORBELL_ENDPOINT_H

#include "opal_config.h"

#include <sys/types.h>

#include "opal/class/opal_list.h"
#include "opal/util/proc.h"

BEGIN_C_DECLS

struct mca_btl_base_endpoint_t {
    /* links the endpoint into module->pending_endpoints */
    opal_list_item_t super;

    struct opal_proc_t *proc;
    uint32_t task;              /* core peer id (the vpid for this job's procs) */
    int path;                   /* doorbell_peer_path at connect: 1 shm, 2 tcp */
    struct mca_btl_doorbell_module_t *module;  /* the module that reaches it (by path) */
    pid_t pid;                  /* the peer's process id (from its modex) */
    bool cma;                   /* its memory can be read: btl_get works */

    /* descriptors the core refused (WOULD_BLOCK), in send order; while any
     * are queued, later sends queue behind them (module->pending_lock) */
    opal_list_t pending;
    volatile int32_t npending;
    bool on_pending_list;

    bool deleted;               /* del_procs was called */
    bool lost;                  /* the peer process is gone */

    /* osc rdma wants one module that reaches every rank of a window
     * (btl_doorbell_rdma.c), so the TCP module also reaches this process
     * and its same-node peers, by aliases that bml lists for RDMA only:
     * `real` is the endpoint an alias stands for (NULL in a real one), and
     * `rma_alias` the alias of a real one, made on first use. */
    struct mca_btl_base_endpoint_t *real;
    struct mca_btl_base_endpoint_t *rma_alias;
};
typedef struct mca_btl_base_endpoint_t mca_btl_base_endpoint_t;
typedef mca_btl_base_endpoint_t mca_btl_doorbell_endpoint_t;

OBJ_CLASS_DECLARATION(mca_btl_doorbell_endpoint_t);

/* The endpoint whose path serves `ep` (itself, unless it is an alias). */
static inline mca_btl_doorbell_endpoint_t *mca_btl_doorbell_rdma_endpoint(mca_btl_doorbell_endpoint_t *ep)
{
    return NULL != ep->real ? ep->real : ep;
}

END_C_DECLS

#endif /* MCA_BTL_DOORBELL_ENDPOINT_H */
