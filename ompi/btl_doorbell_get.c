/* btl_doorbell_get.c -- single-copy reads from a same-node peer (CMA).
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
 * ring.  Peers reached over TCP cannot be read: a job with any such peer
 * stops offering GET from then on (bml reads the flag per endpoint).
 */
#include "opal_config.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "btl_doorbell.h"
#include "btl_doorbell_endpoint.h"

/* The word a peer reads to check that it can read this process. */
const uint64_t mca_btl_doorbell_cma_probe_word = 0x646f6f7262656c6cull; /* "doorbell" */

static int read_peer(pid_t pid, void *local, uint64_t remote, size_t size)
{
    size_t done = 0;

    while (done < size) {
        struct iovec l = {.iov_base = (char *) local + done, .iov_len = size - done};
        struct iovec r = {.iov_base = (void *) (uintptr_t) (remote + done), .iov_len = size - done};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
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
           OPAL_SUCCESS == read_peer(pid, &word, probe_address, sizeof(word)) &&
           word == mca_btl_doorbell_cma_probe_word;
}

int mca_btl_doorbell_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                         void *local_address, uint64_t remote_address,
                         struct mca_btl_base_registration_handle_t *local_handle,
                         struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                         int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                         void *cbcontext, void *cbdata)
{
    (void) remote_handle;
    (void) flags;
    (void) order;

    if (OPAL_UNLIKELY(!endpoint->cma || endpoint->lost)) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if (OPAL_UNLIKELY(OPAL_SUCCESS != read_peer(endpoint->pid, local_address, remote_address, size))) {
        opal_output(0, "btl doorbell: reading %zu bytes from task %u (pid %d) failed: %s",
                    size, endpoint->task, (int) endpoint->pid, strerror(errno));
        return OPAL_ERROR;
    }
    ((mca_btl_doorbell_module_t *) btl)->main->single_copy_reads++;
    /* the data is in place: complete now, as vader's CMA get does */
    cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
    return OPAL_SUCCESS;
}
