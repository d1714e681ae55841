/* btl_doorbell_osc_fix.h -- Open MPI 4.1.1-4.1.4's osc rdma deadlock on
 * dynamic windows across nodes, undone (see btl_doorbell_osc_fix.c). */
#ifndef MCA_BTL_DOORBELL_OSC_FIX_H
#define MCA_BTL_DOORBELL_OSC_FIX_H

#include <stdbool.h>
#include <stdint.h>

/* Wrap osc rdma's find_dynamic_region if this Open MPI has the deadlock
 * and osc rdma is loaded now; later loads go through
 * mca_btl_doorbell_osc_fix_loaded.  Returns true if the fix applies to
 * this Open MPI. */
bool mca_btl_doorbell_osc_fix_install(void);

/* A library was just loaded (libopen-pal's dlopen): wrap it if it is osc
 * rdma. */
void mca_btl_doorbell_osc_fix_loaded(void *handle);

/* Is this atomic (on `endpoint`'s memory at `addr`; DOORBELL_AOP_*) the
 * exclusive region lock that the wrapped find_dynamic_region of this
 * thread takes or releases?  Then nobody runs it: it succeeds, and a
 * compare-and-swap reads 0 (the lock was free). */
bool mca_btl_doorbell_osc_fix_elides(const void *endpoint, uint64_t addr, uint32_t aop,
                                     uint64_t operand, uint64_t compare, uint32_t width);

#endif
