/*
 * floor_prov.c -- "floor": the leanest spinning shared-memory libfabric
 * provider we could write for Open MPI's pml cm + mtl ofi on one node.
 * It exists to measure a floor, not to be used: see README.md.
 *
 * Layout: every endpoint owns one POSIX shm segment (/dev/shm/floor-PID-N)
 * holding NSLOTS sender slots.  A sender claims one slot in a receiver's
 * segment (CAS on the slot's owner word), once per peer.  A slot is a
 * single-producer single-consumer ring of 64-byte cells.  A record is a
 * header cell (valid word written last, with a release store) plus payload
 * cells; payloads up to INL bytes ride in the header cell.  Messages above
 * FRAG bytes go as a head record and continuation records (pipelined).
 * The receiver publishes its consumed position once per quarter ring.  The
 * valid word is position + 1; the sender clears the next header's word only
 * when that cell last held payload (see put()), so one-cell messages touch
 * one line.  Slot pages are prefaulted when a slot is claimed/discovered.
 * Matching (posted and unexpected FIFO lists), completions (a growable CQ
 * ring) and progress (inside fi_cq_read) are all process-local, lock-free
 * and single-threaded (FI_THREAD_DOMAIN: the MPI serializes calls).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

/* The fi_ops_* tables fix every signature; most entry points ignore some
 * of their arguments, and the stubs ignore all of them. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define NSLOTS 64                 /* senders per receiving endpoint */
#define RING_CELLS 4096u          /* 256 KiB of 64-byte cells per slot */
#define RING_MASK (RING_CELLS - 1)
#define PUBLISH (RING_CELLS / 4)  /* receiver publishes its head this often */
#define INL 24                    /* payload bytes inside the header cell */
#define FRAG 65536u               /* largest record payload */
#define MIN_FRAG 4096u            /* smallest continuation worth writing */
#define INJECT FRAG
#define MAX_MSG (1ull << 30)
#define SEG_MAGIC 0x31726f6f6c66ull /* "floor1" */
#define CAPS (FI_TAGGED | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV)
#define MIN(a, b) ((a) < (b) ? (a) : (b))

#ifdef FLOOR_TRACE
enum { C_TSEND, C_TSENDDATA, C_TSENDMSG, C_TINJECT, C_TINJECTDATA, C_TRECV, C_TRECVMSG, C_PEEK,
       C_CLAIM, C_DISCARD, C_CANCEL, C_CQREAD, C_CQREADERR, C_EAGAIN, C_NCNT };
static const char *cnt_name[C_NCNT] = { "tsend", "tsenddata", "tsendmsg", "tinject", "tinjectdata",
    "trecv", "trecvmsg", "peek", "claim", "discard", "cancel", "cq_read", "cq_readerr", "send_eagain" };
static unsigned long cnt[C_NCNT];
#define CNT(i) (cnt[i]++)
#define LOG(...) fprintf(stderr, "floor[%d]: " __VA_ARGS__) /* first argument: PID */
#define PID getpid(),
#else
#define CNT(i) ((void)0)
#define LOG(...) ((void)0)
#define PID
#endif

/* ---- shared memory ---- */
struct cell {
	uint64_t seq;              /* position + 1 when valid; written last */
	uint64_t tag, data;
	uint32_t total, flen, flags, pad; /* message length, this record's payload */
	uint8_t inl[INL];
} __attribute__((aligned(64)));
enum { F_DATA = 1, F_CONT = 2 };

struct slot {
	uint64_t owner;            /* sender's key, 0 = free */
	uint8_t pad0[56];
	uint64_t head;             /* receiver's consumed position, published */
	uint8_t pad1[56];
	struct cell ring[RING_CELLS];
};
struct seg {
	uint64_t magic, nonce;
	uint8_t pad[48];
	struct slot slot[NSLOTS];
};
_Static_assert(sizeof(struct cell) == 64, "cell is one line");

struct faddr { uint64_t key, nonce; }; /* key = pid << 32 | endpoint number */

/* ---- objects ---- */
struct fab { struct fid_fabric f; };
struct dom { struct fid_domain d; struct fab *fab; };
struct fmr { struct fid_mr m; };
struct cqe { struct fi_cq_tagged_entry e; fi_addr_t src; int err; size_t olen; };
struct ep;
struct cq {
	struct fid_cq c;
	struct dom *dom;
	size_t esize, cap, head, tail;
	struct cqe *q;
	struct ep *eps[8];
	int neps;
};
struct aventry { struct faddr a; int live; };
struct av { struct fid_av a; struct aventry *e; size_t n, cap; };
struct conn {                  /* a sender's view of one peer's slot */
	struct conn *next;
	uint64_t key, tail, chead; /* chead: last head read from the slot */
	uint64_t pay_end;          /* 1 + the last position written as payload */
	struct seg *seg;
	struct slot *slot;
	const char *pbuf;          /* a large send in progress (plen != 0) */
	size_t plen, poff;
	uint64_t ptag, pdata;
	uint32_t pflags;
	int pcomp;
	void *pctx;
};
struct prx {                   /* posted receive */
	struct prx *next;
	char *buf;
	size_t len;
	fi_addr_t src;
	uint64_t tag, ignore;
	void *ctx;
	int comp;
};
struct uxm {                   /* unexpected message */
	struct uxm *next;
	uint64_t tag, data;
	size_t len, got;
	uint32_t flags;
	int slot, incomplete;
	void *claim;
	char *buf;
	char small[64];
};
struct rxs {                   /* a multi-record message arriving on a slot */
	char *dst;
	size_t cap, off, total;
	uint64_t tag, data;
	uint32_t flags;
	struct prx *p;             /* matched a posted receive, or */
	struct uxm *u;             /* buffered unexpected, or neither: discard */
};
struct ep {
	struct fid_ep e;
	struct dom *dom;
	struct av *av;
	struct cq *txcq, *rxcq;
	int txsel, rxsel, txcomp, rxcomp;
	uint64_t txflags, rxflags;
	struct faddr me;
	char name[48];
	struct seg *seg;
	int nseen;                 /* slots [0, nseen) are claimed */
	uint64_t rh[NSLOTS], pub[NSLOTS];
	fi_addr_t sfa[NSLOTS];     /* slot -> sender's fi_addr, resolved lazily */
	struct rxs rs[NSLOTS];
	struct prx *ph, **pt, *pfree;
	struct uxm *uh, **ut;
	struct conn *conns, **pc;  /* pc: fi_addr -> conn cache */
	size_t npc;
	int npend;
};

static struct fi_ops fab_fi_ops, dom_fi_ops, mr_fi_ops, av_fi_ops, cq_fi_ops, ep_fi_ops;
static struct fi_ops_fabric fab_ops;
static struct fi_ops_domain dom_ops;
static struct fi_ops_mr mr_ops;
static struct fi_ops_av av_ops;
static struct fi_ops_cq cq_ops;
static struct fi_ops_ep ep_ops;
static struct fi_ops_cm cm_ops;
static struct fi_ops_msg msg_ops;
static struct fi_ops_rma rma_ops;
static struct fi_ops_tagged tagged_ops;
static struct fi_ops_atomic atomic_ops;
static struct fi_ops_collective coll_ops;
static struct fi_provider floor_prov;

static void fid_init(struct fid *f, size_t fclass, void *ctx, struct fi_ops *ops)
{
	f->fclass = fclass;
	f->context = ctx;
	f->ops = ops;
}

/* ---- completion queue ---- */
static void cq_put(struct cq *cq, void *ctx, uint64_t flags, size_t len, void *buf, uint64_t data,
		   uint64_t tag, fi_addr_t src, int err, size_t olen)
{
	struct cqe *x;
	if (!cq)
		return;
	if (cq->tail - cq->head == cq->cap) { /* full: double, keeping order */
		struct cqe *q = malloc(2 * cq->cap * sizeof *q);
		if (!q)
			abort();
		for (size_t i = 0; i < cq->cap; i++)
			q[i] = cq->q[(cq->head + i) & (cq->cap - 1)];
		free(cq->q);
		cq->q = q;
		cq->head = 0;
		cq->tail = cq->cap;
		cq->cap *= 2;
	}
	x = &cq->q[cq->tail++ & (cq->cap - 1)];
	x->e.op_context = ctx;
	x->e.flags = flags;
	x->e.len = len;
	x->e.buf = buf;
	x->e.data = data;
	x->e.tag = tag;
	x->src = src;
	x->err = err;
	x->olen = olen;
}

static void progress(struct ep *ep);

static ssize_t cq_readfrom(struct fid_cq *c, void *buf, size_t count, fi_addr_t *src)
{
	struct cq *cq = (struct cq *)c;
	size_t n = 0;
	CNT(C_CQREAD);
	for (int i = 0; i < cq->neps; i++)
		progress(cq->eps[i]);
	while (n < count && cq->head != cq->tail) {
		struct cqe *x = &cq->q[cq->head & (cq->cap - 1)];
		if (x->err)
			break;
		if (cq->esize == sizeof x->e)
			((struct fi_cq_tagged_entry *)buf)[n] = x->e;
		else
			memcpy((char *)buf + n * cq->esize, &x->e, cq->esize);
		if (src)
			src[n] = x->src;
		cq->head++;
		n++;
	}
	if (cq->head == cq->tail) /* drained: reuse the same (cached) entries */
		cq->head = cq->tail = 0;
	if (n)
		return (ssize_t)n;
	return cq->head != cq->tail ? -FI_EAVAIL : -FI_EAGAIN;
}

static ssize_t cq_read(struct fid_cq *c, void *buf, size_t count)
{
	return cq_readfrom(c, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *c, struct fi_cq_err_entry *buf, uint64_t flags)
{
	struct cq *cq = (struct cq *)c;
	struct cqe *x = &cq->q[cq->head & (cq->cap - 1)];
	CNT(C_CQREADERR);
	if (cq->head == cq->tail || !x->err)
		return -FI_EAGAIN;
	buf->op_context = x->e.op_context;
	buf->flags = x->e.flags;
	buf->len = x->e.len;
	buf->buf = x->e.buf;
	buf->data = x->e.data;
	buf->tag = x->e.tag;
	buf->olen = x->olen;
	buf->err = x->err;
	buf->prov_errno = x->err;
	buf->err_data = NULL;
	if (FI_VERSION_GE(cq->dom->fab->f.api_version, FI_VERSION(1, 5)))
		buf->err_data_size = 0;
	cq->head++;
	return 1;
}

static const char *cq_strerror(struct fid_cq *c, int prov_errno, const void *err_data, char *buf, size_t len)
{
	const char *s = prov_errno == FI_ETRUNC ? "message truncated" :
			prov_errno == FI_ECANCELED ? "operation canceled" :
			prov_errno == FI_ENOMSG ? "no matching message" : "floor error";
	if (buf && len) {
		snprintf(buf, len, "%s", s);
		return buf;
	}
	return s;
}

static int cq_close(struct fid *f)
{
	struct cq *cq = (struct cq *)f;
	for (int i = 0; i < cq->neps; i++) {
		if (cq->eps[i]->txcq == cq)
			cq->eps[i]->txcq = NULL;
		if (cq->eps[i]->rxcq == cq)
			cq->eps[i]->rxcq = NULL;
	}
	free(cq->q);
	free(cq);
	return 0;
}

static int dom_cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **out, void *ctx)
{
	struct cq *cq;
	size_t es;
	switch (attr->format) {
	case FI_CQ_FORMAT_UNSPEC:
	case FI_CQ_FORMAT_TAGGED: es = sizeof(struct fi_cq_tagged_entry); break;
	case FI_CQ_FORMAT_CONTEXT: es = sizeof(struct fi_cq_entry); break;
	case FI_CQ_FORMAT_MSG: es = sizeof(struct fi_cq_msg_entry); break;
	case FI_CQ_FORMAT_DATA: es = sizeof(struct fi_cq_data_entry); break;
	default: return -FI_ENOSYS;
	}
	if (attr->wait_obj != FI_WAIT_NONE) /* spin only */
		return -FI_ENOSYS;
	cq = calloc(1, sizeof *cq);
	if (!cq)
		return -FI_ENOMEM;
	cq->cap = 1024;
	cq->q = malloc(cq->cap * sizeof *cq->q);
	if (!cq->q) {
		free(cq);
		return -FI_ENOMEM;
	}
	fid_init(&cq->c.fid, FI_CLASS_CQ, ctx, &cq_fi_ops);
	cq->c.ops = &cq_ops;
	cq->dom = (struct dom *)d;
	cq->esize = es;
	LOG("cq_open size %zu format %d wait_obj %d\n", PID attr->size, attr->format, attr->wait_obj);
	*out = &cq->c;
	return 0;
}

/* ---- receive side ---- */
/* fault a slot's pages in now rather than on the first lap of its ring */
static void populate(struct slot *sl)
{
	uintptr_t a = (uintptr_t)sl & ~(uintptr_t)4095, b = (uintptr_t)(sl + 1);
	(void)madvise((void *)a, b - a, MADV_POPULATE_WRITE); /* best effort */
}

static struct prx *prx_get(struct ep *ep)
{
	struct prx *p = ep->pfree;
	if (p) {
		ep->pfree = p->next;
		return p;
	}
	return malloc(sizeof *p);
}

static void prx_put(struct ep *ep, struct prx *p)
{
	p->next = ep->pfree;
	ep->pfree = p;
}

static void uxm_free(struct uxm *u)
{
	if (u->buf != u->small)
		free(u->buf);
	free(u);
}

static fi_addr_t slot_resolve(struct ep *ep, int si)
{
	if (ep->av) {
		uint64_t key = ep->seg->slot[si].owner;
		for (size_t i = 0; i < ep->av->n; i++)
			if (ep->av->e[i].live && ep->av->e[i].a.key == key) {
				ep->sfa[si] = i;
				break;
			}
	}
	return ep->sfa[si];
}

static inline fi_addr_t slot_fa(struct ep *ep, int si)
{
	return ep->sfa[si] != FI_ADDR_NOTAVAIL ? ep->sfa[si] : slot_resolve(ep, si);
}

static inline int tag_match(uint64_t a, uint64_t b, uint64_t ignore)
{
	return ((a ^ b) & ~ignore) == 0;
}

#define RFLAGS(f) (FI_RECV | FI_TAGGED | (((f) & F_DATA) ? FI_REMOTE_CQ_DATA : 0))

static void complete_recv(struct ep *ep, void *ctx, int comp, char *buf, size_t cap, size_t total,
			  uint64_t tag, uint64_t data, uint32_t fl, int si)
{
	if (total > cap)
		cq_put(ep->rxcq, ctx, RFLAGS(fl), cap, buf, data, tag, slot_fa(ep, si), FI_ETRUNC, total - cap);
	else if (comp)
		cq_put(ep->rxcq, ctx, RFLAGS(fl), total, buf, data, tag, slot_fa(ep, si), 0, 0);
}

/* copy n bytes of a record's payload (flen bytes, header cell at position h) */
static void copy_out(char *dst, const struct cell *ring, uint64_t h, uint32_t flen, size_t n)
{
	uint32_t i;
	size_t first;
	if (!n)
		return;
	if (flen <= INL) {
		memcpy(dst, ring[h & RING_MASK].inl, n);
		return;
	}
	i = (h + 1) & RING_MASK;
	first = (size_t)(RING_CELLS - i) * 64;
	if (n <= first) {
		memcpy(dst, &ring[i], n);
	} else {
		memcpy(dst, &ring[i], first);
		memcpy(dst + first, ring, n - first);
	}
}

/* consume the record at position h of slot si; returns its number of cells */
static uint64_t deliver(struct ep *ep, int si, const struct cell *ring, uint64_t h)
{
	const struct cell *c = &ring[h & RING_MASK];
	uint32_t flen = c->flen, fl = c->flags;
	uint64_t ncell = 1 + (flen > INL ? (flen + 63) / 64 : 0), tag, data;
	size_t total;
	struct rxs *rs = &ep->rs[si];
	struct prx **pp, *p;
	struct uxm *u;

	if (fl & F_CONT) {
		if (rs->off < rs->cap)
			copy_out(rs->dst + rs->off, ring, h, flen, MIN(flen, rs->cap - rs->off));
		rs->off += flen;
		if (rs->u)
			rs->u->got = rs->off;
		if (rs->off >= rs->total) {
			if (rs->p) {
				complete_recv(ep, rs->p->ctx, rs->p->comp, rs->p->buf, rs->p->len, rs->total,
					      rs->tag, rs->data, rs->flags, si);
				prx_put(ep, rs->p);
			} else if (rs->u) {
				rs->u->incomplete = 0;
			}
			rs->p = NULL;
			rs->u = NULL;
		}
		return ncell;
	}
	tag = c->tag;
	data = c->data;
	total = c->total;
	for (pp = &ep->ph; (p = *pp); pp = &p->next)
		if (tag_match(p->tag, tag, p->ignore) && (p->src == FI_ADDR_UNSPEC || p->src == slot_fa(ep, si)))
			break;
	if (p) {
		if (!(*pp = p->next))
			ep->pt = pp;
		copy_out(p->buf, ring, h, flen, MIN(flen, p->len));
		if (total == flen) {
			complete_recv(ep, p->ctx, p->comp, p->buf, p->len, total, tag, data, fl, si);
			prx_put(ep, p);
		} else {
			*rs = (struct rxs){ p->buf, p->len, flen, total, tag, data, fl, p, NULL };
		}
		return ncell;
	}
	u = malloc(sizeof *u);
	if (!u)
		abort();
	u->buf = total <= sizeof u->small ? u->small : malloc(total);
	if (!u->buf)
		abort();
	copy_out(u->buf, ring, h, flen, flen);
	u->next = NULL;
	u->tag = tag;
	u->data = data;
	u->len = total;
	u->got = flen;
	u->flags = fl;
	u->slot = si;
	u->incomplete = total != flen;
	u->claim = NULL;
	*ep->ut = u;
	ep->ut = &u->next;
	if (u->incomplete)
		*rs = (struct rxs){ u->buf, total, flen, total, tag, data, fl, NULL, u };
	return ncell;
}

static int push(struct ep *ep, struct conn *c);

static void progress(struct ep *ep)
{
	struct seg *s = ep->seg;
	if (ep->npend)
		for (struct conn *c = ep->conns; c; c = c->next)
			if (c->plen)
				push(ep, c);
	while (ep->nseen < NSLOTS && __atomic_load_n(&s->slot[ep->nseen].owner, __ATOMIC_ACQUIRE)) {
		populate(&s->slot[ep->nseen]);
		ep->sfa[ep->nseen++] = FI_ADDR_NOTAVAIL;
	}
	for (int i = 0; i < ep->nseen; i++) {
		const struct cell *ring = s->slot[i].ring;
		uint64_t h = ep->rh[i];
		while (__atomic_load_n(&ring[h & RING_MASK].seq, __ATOMIC_ACQUIRE) == h + 1)
			h += deliver(ep, i, ring, h);
		if (h != ep->rh[i]) {
			ep->rh[i] = h;
			if (h - ep->pub[i] >= PUBLISH) {
				__atomic_store_n(&s->slot[i].head, h, __ATOMIC_RELEASE);
				ep->pub[i] = h;
			}
		}
	}
}

static struct uxm **ux_find(struct ep *ep, fi_addr_t src, uint64_t tag, uint64_t ignore)
{
	for (struct uxm **up = &ep->uh; *up; up = &(*up)->next) {
		struct uxm *u = *up;
		if (!u->claim && tag_match(u->tag, tag, ignore) &&
		    (src == FI_ADDR_UNSPEC || src == slot_fa(ep, u->slot)))
			return up;
	}
	return NULL;
}

static struct uxm *ux_unlink(struct ep *ep, struct uxm **up)
{
	struct uxm *u = *up;
	if (!(*up = u->next))
		ep->ut = up;
	return u;
}

/* receive a dequeued unexpected message into buf (or the rest of it, later) */
static ssize_t take_uxm(struct ep *ep, struct uxm *u, char *buf, size_t len, void *ctx, int comp)
{
	if (len && u->got)
		memcpy(buf, u->buf, MIN(u->got, len));
	if (u->incomplete) {
		struct rxs *rs = &ep->rs[u->slot];
		struct prx *p = prx_get(ep);
		if (!p)
			return -FI_ENOMEM;
		*p = (struct prx){ NULL, buf, len, FI_ADDR_UNSPEC, u->tag, 0, ctx, comp };
		rs->p = p;
		rs->u = NULL;
		rs->dst = buf;
		rs->cap = len;
	} else {
		complete_recv(ep, ctx, comp, buf, len, u->len, u->tag, u->data, u->flags, u->slot);
	}
	uxm_free(u);
	return 0;
}

static void discard_uxm(struct ep *ep, struct uxm *u)
{
	if (u->incomplete) { /* the rest of it goes nowhere */
		struct rxs *rs = &ep->rs[u->slot];
		rs->u = NULL;
		rs->p = NULL;
		rs->dst = NULL;
		rs->cap = 0;
	}
	uxm_free(u);
}

static ssize_t recv_common(struct ep *ep, void *buf, size_t len, fi_addr_t src, uint64_t tag,
			   uint64_t ignore, void *ctx, int comp)
{
	struct uxm **up = ep->uh ? ux_find(ep, src, tag, ignore) : NULL;
	struct prx *p;
	if (up)
		return take_uxm(ep, ux_unlink(ep, up), buf, len, ctx, comp);
	p = prx_get(ep);
	if (!p)
		return -FI_ENOMEM;
	*p = (struct prx){ NULL, buf, len, src, tag, ignore, ctx, comp };
	*ep->pt = p;
	ep->pt = &p->next;
	return 0;
}

static ssize_t t_recv(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
		      uint64_t ignore, void *ctx)
{
	struct ep *ep = (struct ep *)e;
	CNT(C_TRECV);
	return recv_common(ep, buf, len, src, tag, ignore, ctx, ep->rxcomp);
}

static ssize_t t_recvv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t src, uint64_t tag, uint64_t ignore, void *ctx)
{
	if (count > 1)
		return -FI_EINVAL;
	return t_recv(e, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, NULL, src, tag,
		      ignore, ctx);
}

static ssize_t t_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t flags)
{
	struct ep *ep = (struct ep *)e;
	char *buf = m->iov_count ? m->msg_iov[0].iov_base : NULL;
	size_t len = m->iov_count ? m->msg_iov[0].iov_len : 0;
	int comp = !ep->rxsel || (flags & FI_COMPLETION);
	struct uxm **up, *u;

	CNT(C_TRECVMSG);
	if (m->iov_count > 1)
		return -FI_EINVAL;
	if (flags & FI_PEEK) {
		CNT(C_PEEK);
		progress(ep);
		up = ux_find(ep, m->addr, m->tag, m->ignore);
		if (!up) {
			cq_put(ep->rxcq, m->context, FI_RECV | FI_TAGGED, 0, NULL, 0, m->tag, FI_ADDR_NOTAVAIL,
			       FI_ENOMSG, 0);
			return 0;
		}
		u = *up;
		cq_put(ep->rxcq, m->context, RFLAGS(u->flags), u->len, NULL, u->data, u->tag,
		       slot_fa(ep, u->slot), 0, 0);
		if (flags & FI_DISCARD)
			discard_uxm(ep, ux_unlink(ep, up));
		else if (flags & FI_CLAIM)
			u->claim = m->context;
		return 0;
	}
	if (flags & FI_CLAIM) {
		CNT(C_CLAIM);
		for (up = &ep->uh; *up && (*up)->claim != m->context; up = &(*up)->next)
			;
		if (!*up)
			return -FI_EINVAL;
		u = ux_unlink(ep, up);
		if (flags & FI_DISCARD) {
			CNT(C_DISCARD);
			if (comp)
				cq_put(ep->rxcq, m->context, RFLAGS(u->flags), 0, NULL, u->data, u->tag,
				       slot_fa(ep, u->slot), 0, 0);
			discard_uxm(ep, u);
			return 0;
		}
		return take_uxm(ep, u, buf, len, m->context, comp);
	}
	return recv_common(ep, buf, len, m->addr, m->tag, m->ignore, m->context, comp);
}

static ssize_t ep_cancel(fid_t fid, void *ctx)
{
	struct ep *ep = (struct ep *)fid;
	struct prx **pp, *p;
	CNT(C_CANCEL);
	for (pp = &ep->ph; (p = *pp); pp = &p->next)
		if (p->ctx == ctx) {
			if (!(*pp = p->next))
				ep->pt = pp;
			cq_put(ep->rxcq, ctx, FI_RECV | FI_TAGGED, 0, p->buf, 0, p->tag, FI_ADDR_NOTAVAIL,
			       FI_ECANCELED, 0);
			prx_put(ep, p);
			return 0;
		}
	return -FI_ENOENT;
}

/* ---- send side ---- */
static void seg_name(char *buf, size_t n, uint64_t key)
{
	snprintf(buf, n, "/floor-%u-%u", (unsigned)(key >> 32), (unsigned)key);
}

static struct seg *seg_open(const struct faddr *a)
{
	char name[48];
	struct stat st;
	struct seg *s;
	int fd;
	seg_name(name, sizeof name, a->key);
	fd = shm_open(name, O_RDWR, 0);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof *s) {
		close(fd);
		return NULL;
	}
	s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED)
		return NULL;
	if (s->magic != SEG_MAGIC || s->nonce != a->nonce) {
		munmap(s, sizeof *s);
		return NULL;
	}
	return s;
}

static struct conn *conn_slow(struct ep *ep, fi_addr_t dest)
{
	struct faddr *a;
	struct conn *c;
	int i;
	if (!ep->av || dest >= ep->av->n || !ep->av->e[dest].live)
		return NULL;
	a = &ep->av->e[dest].a;
	for (c = ep->conns; c && c->key != a->key; c = c->next)
		;
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c)
			return NULL;
		c->seg = seg_open(a);
		for (i = 0; c->seg && i < NSLOTS; i++) {
			uint64_t zero = 0;
			if (__atomic_compare_exchange_n(&c->seg->slot[i].owner, &zero, ep->me.key, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				break;
		}
		if (!c->seg || i == NSLOTS) {
			if (c->seg)
				munmap(c->seg, sizeof *c->seg);
			free(c);
			return NULL;
		}
		LOG("connected to peer %llx, slot %d\n", PID (unsigned long long)a->key, i);
		c->slot = &c->seg->slot[i];
		populate(c->slot);
		c->key = a->key;
		c->next = ep->conns;
		ep->conns = c;
	}
	if (dest >= ep->npc) {
		size_t n = dest + 1 > 2 * ep->npc ? dest + 1 : 2 * ep->npc;
		struct conn **pc = realloc(ep->pc, n * sizeof *pc);
		if (!pc)
			return NULL;
		memset(pc + ep->npc, 0, (n - ep->npc) * sizeof *pc);
		ep->pc = pc;
		ep->npc = n;
	}
	return ep->pc[dest] = c;
}

static inline uint64_t cells_for(size_t flen)
{
	return 1 + (flen > INL ? (flen + 63) / 64 : 0);
}

/* free cells, re-reading the receiver's head only when the cached one is short */
static inline uint64_t room(struct conn *c, uint64_t need)
{
	uint64_t fr = RING_CELLS - (c->tail - c->chead);
	if (fr < need) {
		c->chead = __atomic_load_n(&c->slot->head, __ATOMIC_ACQUIRE);
		fr = RING_CELLS - (c->tail - c->chead);
	}
	return fr;
}

/* write one record; the caller checked room for cells_for(flen) + 1 cells */
static void put(struct conn *c, const char *src, size_t flen, size_t total, uint64_t tag, uint64_t data,
		uint32_t fl)
{
	struct cell *ring = c->slot->ring, *h = &ring[c->tail & RING_MASK];
	uint64_t t = c->tail, n = cells_for(flen);
	if (flen <= INL) {
		if (flen)
			memcpy(h->inl, src, flen);
	} else {
		uint32_t i = (t + 1) & RING_MASK;
		size_t first = (size_t)(RING_CELLS - i) * 64;
		if (flen <= first) {
			memcpy(&ring[i], src, flen);
		} else {
			memcpy(&ring[i], src, first);
			memcpy(ring, src + first, flen - first);
		}
	}
	h->tag = tag;
	h->data = data;
	h->total = (uint32_t)total;
	h->flen = (uint32_t)flen;
	h->flags = fl;
	/* The next header's cell still holds what position t + n - RING_CELLS
	 * got; a payload word there could pass for a valid seq: clear it.  A
	 * header (or a never-written cell) cannot, so a stream of one-cell
	 * records never pays for this store. */
	if (t + n >= RING_CELLS && t + n - RING_CELLS < c->pay_end)
		ring[(t + n) & RING_MASK].seq = 0;
	if (n > 1)
		c->pay_end = t + n;
	__atomic_store_n(&h->seq, t + 1, __ATOMIC_RELEASE);
	c->tail = t + n;
}

/* write what fits of a large send; 1 when it is all written (and completed) */
static int push(struct ep *ep, struct conn *c)
{
	while (c->poff < c->plen) {
		size_t fr = MIN(c->plen - c->poff, FRAG);
		uint64_t fc = room(c, cells_for(fr) + 1);
		if (fc < cells_for(fr) + 1) {
			if (fc < 2 + MIN_FRAG / 64)
				return 0;
			fr = (fc - 2) * 64;
		}
		put(c, c->pbuf + c->poff, fr, c->plen, c->ptag, c->pdata, c->pflags | (c->poff ? F_CONT : 0));
		c->poff += fr;
	}
	if (c->pcomp)
		cq_put(ep->txcq, c->pctx, FI_SEND | FI_TAGGED, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL, 0, 0);
	c->plen = c->poff = 0;
	c->pbuf = NULL;
	ep->npend--;
	return 1;
}

static ssize_t send_common(struct ep *ep, const void *buf, size_t len, uint64_t data, uint32_t fl,
			   fi_addr_t dest, uint64_t tag, void *ctx, int comp, int inject)
{
	struct conn *c = dest < ep->npc && ep->pc[dest] ? ep->pc[dest] : conn_slow(ep, dest);
	if (!c)
		return -FI_EINVAL;
	if (c->plen && !push(ep, c)) {
		CNT(C_EAGAIN);
		return -FI_EAGAIN;
	}
	if (len <= FRAG) {
		uint64_t need = cells_for(len) + 1;
		if (room(c, need) < need) {
			CNT(C_EAGAIN);
			return -FI_EAGAIN;
		}
		put(c, buf, len, len, tag, data, fl);
		if (comp)
			cq_put(ep->txcq, ctx, FI_SEND | FI_TAGGED, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL, 0, 0);
		return 0;
	}
	if (inject || len > MAX_MSG)
		return -FI_EMSGSIZE;
	c->pbuf = buf;
	c->plen = len;
	c->poff = 0;
	c->ptag = tag;
	c->pdata = data;
	c->pflags = fl;
	c->pcomp = comp;
	c->pctx = ctx;
	ep->npend++;
	push(ep, c);
	return 0;
}

static ssize_t t_send(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dest,
		      uint64_t tag, void *ctx)
{
	struct ep *ep = (struct ep *)e;
	CNT(C_TSEND);
	return send_common(ep, buf, len, 0, 0, dest, tag, ctx, ep->txcomp, 0);
}

static ssize_t t_sendv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t dest, uint64_t tag, void *ctx)
{
	if (count > 1)
		return -FI_EINVAL;
	return t_send(e, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, NULL, dest, tag, ctx);
}

static ssize_t t_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t flags)
{
	struct ep *ep = (struct ep *)e;
	int dflag = !!(flags & FI_REMOTE_CQ_DATA);
	CNT(C_TSENDMSG);
	if (m->iov_count > 1)
		return -FI_EINVAL;
	return send_common(ep, m->iov_count ? m->msg_iov[0].iov_base : NULL,
			   m->iov_count ? m->msg_iov[0].iov_len : 0, dflag ? m->data : 0, dflag ? F_DATA : 0,
			   m->addr, m->tag, m->context, !ep->txsel || (flags & FI_COMPLETION),
			   !!(flags & FI_INJECT));
}

static ssize_t t_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	CNT(C_TINJECT);
	return send_common((struct ep *)e, buf, len, 0, 0, dest, tag, NULL, 0, 1);
}

static ssize_t t_senddata(struct fid_ep *e, const void *buf, size_t len, void *desc, uint64_t data,
			  fi_addr_t dest, uint64_t tag, void *ctx)
{
	struct ep *ep = (struct ep *)e;
	CNT(C_TSENDDATA);
	return send_common(ep, buf, len, data, F_DATA, dest, tag, ctx, ep->txcomp, 0);
}

static ssize_t t_injectdata(struct fid_ep *e, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
			    uint64_t tag)
{
	CNT(C_TINJECTDATA);
	return send_common((struct ep *)e, buf, len, data, F_DATA, dest, tag, NULL, 0, 1);
}

/* ---- endpoint ---- */
static int ep_close(struct fid *f)
{
	struct ep *ep = (struct ep *)f;
	struct cq *cqs[2] = { ep->txcq, ep->rxcq };
	for (int k = 0; k < 2; k++)
		for (int i = 0; cqs[k] && i < cqs[k]->neps; i++)
			if (cqs[k]->eps[i] == ep)
				cqs[k]->eps[i] = cqs[k]->eps[--cqs[k]->neps];
	for (int i = 0; i < NSLOTS; i++)
		if (ep->rs[i].p)
			prx_put(ep, ep->rs[i].p);
	while (ep->ph) {
		struct prx *p = ep->ph;
		ep->ph = p->next;
		free(p);
	}
	while (ep->pfree) {
		struct prx *p = ep->pfree;
		ep->pfree = p->next;
		free(p);
	}
	while (ep->uh) {
		struct uxm *u = ep->uh;
		ep->uh = u->next;
		uxm_free(u);
	}
	while (ep->conns) {
		struct conn *c = ep->conns;
		ep->conns = c->next;
		munmap(c->seg, sizeof *c->seg);
		free(c);
	}
	free(ep->pc);
	munmap(ep->seg, sizeof *ep->seg);
	shm_unlink(ep->name);
#ifdef FLOOR_TRACE
	for (int i = 0; i < C_NCNT; i++)
		if (cnt[i])
			LOG("%s %lu\n", PID cnt_name[i], cnt[i]);
#endif
	free(ep);
	return 0;
}

static int ep_bind(struct fid *f, struct fid *b, uint64_t flags)
{
	struct ep *ep = (struct ep *)f;
	LOG("ep_bind class %zu flags 0x%llx\n", PID b->fclass, (unsigned long long)flags);
	if (b->fclass == FI_CLASS_AV && b->ops == &av_fi_ops) {
		ep->av = (struct av *)b;
		return 0;
	}
	if (b->fclass == FI_CLASS_CQ && b->ops == &cq_fi_ops) {
		struct cq *cq = (struct cq *)b;
		int i;
		if (flags & FI_TRANSMIT) {
			ep->txcq = cq;
			ep->txsel = !!(flags & FI_SELECTIVE_COMPLETION);
			ep->txcomp = !ep->txsel || (ep->txflags & FI_COMPLETION);
		}
		if (flags & FI_RECV) {
			ep->rxcq = cq;
			ep->rxsel = !!(flags & FI_SELECTIVE_COMPLETION);
			ep->rxcomp = !ep->rxsel || (ep->rxflags & FI_COMPLETION);
		}
		for (i = 0; i < cq->neps && cq->eps[i] != ep; i++)
			;
		if (i == cq->neps) {
			if (cq->neps == (int)(sizeof cq->eps / sizeof cq->eps[0]))
				return -FI_ENOSPC;
			cq->eps[cq->neps++] = ep;
		}
		return 0;
	}
	return -FI_ENOSYS;
}

static int ep_control(struct fid *f, int cmd, void *arg)
{
	LOG("ep_control %d\n", PID cmd);
	return cmd == FI_ENABLE ? 0 : -FI_ENOSYS;
}

static int ep_getname(fid_t f, void *addr, size_t *addrlen)
{
	struct ep *ep = (struct ep *)f;
	size_t n = *addrlen;
	LOG("getname buflen %zu\n", PID n);
	*addrlen = sizeof ep->me;
	if (n < sizeof ep->me)
		return -FI_ETOOSMALL;
	memcpy(addr, &ep->me, sizeof ep->me);
	return 0;
}

static int ep_getopt(fid_t f, int level, int name, void *val, size_t *len)
{
	LOG("getopt %d %d\n", PID level, name);
	return -FI_ENOPROTOOPT;
}

static int ep_setopt(fid_t f, int level, int name, const void *val, size_t len)
{
	LOG("setopt %d %d\n", PID level, name);
	return level == FI_OPT_ENDPOINT && name == FI_OPT_MIN_MULTI_RECV ? 0 : -FI_ENOPROTOOPT;
}

static ssize_t ep_size_left(struct fid_ep *e)
{
	return 1024;
}

static int dom_endpoint(struct fid_domain *d, struct fi_info *info, struct fid_ep **out, void *ctx)
{
	static uint32_t counter;
	struct timespec ts;
	struct ep *ep;
	int fd;
	if (!info || (info->ep_attr && info->ep_attr->type != FI_EP_RDM))
		return -FI_EINVAL;
	ep = calloc(1, sizeof *ep);
	if (!ep)
		return -FI_ENOMEM;
	fid_init(&ep->e.fid, FI_CLASS_EP, ctx, &ep_fi_ops);
	ep->e.ops = &ep_ops;
	ep->e.cm = &cm_ops;
	ep->e.msg = &msg_ops;
	ep->e.rma = &rma_ops;
	ep->e.tagged = &tagged_ops;
	ep->e.atomic = &atomic_ops;
	ep->e.collective = &coll_ops;
	ep->dom = (struct dom *)d;
	ep->txflags = info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rxflags = info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->txcomp = ep->rxcomp = 1;
	ep->pt = &ep->ph;
	ep->ut = &ep->uh;
	ep->me.key = (uint64_t)getpid() << 32 | __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
	clock_gettime(CLOCK_REALTIME, &ts);
	ep->me.nonce = ((uint64_t)ts.tv_nsec << 32 ^ (uint64_t)ts.tv_sec ^ (uintptr_t)ep) | 1;
	seg_name(ep->name, sizeof ep->name, ep->me.key);
	fd = shm_open(ep->name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 && errno == EEXIST) { /* left by a dead process with our pid */
		shm_unlink(ep->name);
		fd = shm_open(ep->name, O_RDWR | O_CREAT | O_EXCL, 0600);
	}
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, sizeof *ep->seg)) {
		close(fd);
		goto fail_unlink;
	}
	ep->seg = mmap(NULL, sizeof *ep->seg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (ep->seg == MAP_FAILED)
		goto fail_unlink;
	ep->seg->magic = SEG_MAGIC;
	ep->seg->nonce = ep->me.nonce;
	LOG("endpoint %s tx op_flags 0x%llx rx op_flags 0x%llx\n", PID ep->name,
	    (unsigned long long)ep->txflags, (unsigned long long)ep->rxflags);
	*out = &ep->e;
	return 0;
fail_unlink:
	shm_unlink(ep->name);
fail:
	free(ep);
	return -FI_ENOMEM;
}

/* ---- address vector ---- */
static int av_insert(struct fid_av *a, const void *addr, size_t count, fi_addr_t *fa, uint64_t flags,
		     void *ctx)
{
	struct av *av = (struct av *)a;
	LOG("av_insert count %zu flags 0x%llx\n", PID count, (unsigned long long)flags);
	if (av->n + count > av->cap) {
		size_t cap = av->n + count > 2 * av->cap ? av->n + count : 2 * av->cap;
		struct aventry *e = realloc(av->e, cap * sizeof *e);
		if (!e)
			return -FI_ENOMEM;
		av->e = e;
		av->cap = cap;
	}
	for (size_t i = 0; i < count; i++) {
		memcpy(&av->e[av->n].a, (const char *)addr + i * sizeof(struct faddr), sizeof(struct faddr));
		av->e[av->n].live = 1;
		if (fa)
			fa[i] = av->n;
		av->n++;
	}
	return (int)count;
}

static int av_remove(struct fid_av *a, fi_addr_t *fa, size_t count, uint64_t flags)
{
	struct av *av = (struct av *)a;
	LOG("av_remove count %zu\n", PID count);
	for (size_t i = 0; i < count; i++)
		if (fa[i] < av->n)
			av->e[fa[i]].live = 0;
	return 0;
}

static int av_lookup(struct fid_av *a, fi_addr_t fa, void *addr, size_t *addrlen)
{
	struct av *av = (struct av *)a;
	if (fa >= av->n)
		return -FI_EINVAL;
	memcpy(addr, &av->e[fa].a, MIN(*addrlen, sizeof(struct faddr)));
	*addrlen = sizeof(struct faddr);
	return 0;
}

static const char *av_straddr(struct fid_av *a, const void *addr, char *buf, size_t *len)
{
	struct faddr f;
	int n;
	memcpy(&f, addr, sizeof f);
	n = snprintf(buf, *len, "floor://%u:%u", (unsigned)(f.key >> 32), (unsigned)f.key);
	*len = (size_t)n + 1;
	return buf;
}

static int av_close(struct fid *f)
{
	struct av *av = (struct av *)f;
	free(av->e);
	free(av);
	return 0;
}

static int dom_av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **out, void *ctx)
{
	struct av *av;
	LOG("av_open type %d count %zu\n", PID attr ? (int)attr->type : -1, attr ? attr->count : 0);
	if (attr && attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE)
		return -FI_EINVAL;
	if (attr && (attr->rx_ctx_bits || attr->name))
		return -FI_ENOSYS;
	av = calloc(1, sizeof *av);
	if (!av)
		return -FI_ENOMEM;
	fid_init(&av->a.fid, FI_CLASS_AV, ctx, &av_fi_ops);
	av->a.ops = &av_ops;
	*out = &av->a;
	return 0;
}

/* ---- memory registration (mr_mode 0: nothing to do) ---- */
static int mr_close(struct fid *f)
{
	free(f);
	return 0;
}

static int mr_reg(struct fid *f, const void *buf, size_t len, uint64_t access, uint64_t offset,
		  uint64_t key, uint64_t flags, struct fid_mr **mr, void *ctx)
{
	struct fmr *m = calloc(1, sizeof *m);
	if (!m)
		return -FI_ENOMEM;
	fid_init(&m->m.fid, FI_CLASS_MR, ctx, &mr_fi_ops);
	m->m.key = key;
	*mr = &m->m;
	return 0;
}

static int mr_regv(struct fid *f, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
		   uint64_t key, uint64_t flags, struct fid_mr **mr, void *ctx)
{
	return mr_reg(f, NULL, 0, access, offset, key, flags, mr, ctx);
}

static int mr_regattr(struct fid *f, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
	return mr_reg(f, NULL, 0, attr->access, attr->offset, attr->requested_key, flags, mr, attr->context);
}

/* ---- domain, fabric ---- */
static int dom_close(struct fid *f)
{
	free(f);
	return 0;
}

static int fab_domain(struct fid_fabric *f, struct fi_info *info, struct fid_domain **out, void *ctx)
{
	struct dom *d = calloc(1, sizeof *d);
	LOG("domain threading %d\n", PID info && info->domain_attr ? (int)info->domain_attr->threading : -1);
	if (!d)
		return -FI_ENOMEM;
	fid_init(&d->d.fid, FI_CLASS_DOMAIN, ctx, &dom_fi_ops);
	d->d.ops = &dom_ops;
	d->d.mr = &mr_ops;
	d->fab = (struct fab *)f;
	*out = &d->d;
	return 0;
}

static int fab_close(struct fid *f)
{
	free(f);
	return 0;
}

static int floor_fabric(struct fi_fabric_attr *attr, struct fid_fabric **out, void *ctx)
{
	struct fab *fb;
	if (attr && attr->name && strcmp(attr->name, "floor"))
		return -FI_ENODATA;
	fb = calloc(1, sizeof *fb);
	if (!fb)
		return -FI_ENOMEM;
	fid_init(&fb->f.fid, FI_CLASS_FABRIC, ctx, &fab_fi_ops);
	fb->f.ops = &fab_ops;
	*out = &fb->f;
	return 0;
}

/* ---- getinfo ---- */
static int hints_ok(const struct fi_info *h)
{
	if (!h)
		return 1;
	if ((h->caps & ~CAPS) || h->addr_format != FI_FORMAT_UNSPEC)
		return 0;
	if (h->ep_attr && ((h->ep_attr->type != FI_EP_UNSPEC && h->ep_attr->type != FI_EP_RDM) ||
			   h->ep_attr->protocol != FI_PROTO_UNSPEC || h->ep_attr->max_msg_size > MAX_MSG ||
			   h->ep_attr->tx_ctx_cnt > 1 || h->ep_attr->rx_ctx_cnt > 1 || h->ep_attr->auth_key_size))
		return 0;
	if (h->tx_attr && ((h->tx_attr->caps & ~CAPS) || (h->tx_attr->msg_order & ~FI_ORDER_SAS) ||
			   (h->tx_attr->op_flags & ~(FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE)) ||
			   h->tx_attr->inject_size > INJECT || h->tx_attr->iov_limit > 1 ||
			   h->tx_attr->rma_iov_limit))
		return 0;
	if (h->rx_attr && ((h->rx_attr->caps & ~CAPS) || (h->rx_attr->msg_order & ~FI_ORDER_SAS) ||
			   (h->rx_attr->op_flags & ~FI_COMPLETION) || h->rx_attr->iov_limit > 1))
		return 0;
	if (h->domain_attr) {
		const struct fi_domain_attr *d = h->domain_attr;
		if ((d->name && strcmp(d->name, "floor")) ||
		    (d->threading != FI_THREAD_UNSPEC && d->threading != FI_THREAD_DOMAIN) ||
		    d->control_progress == FI_PROGRESS_AUTO || d->data_progress == FI_PROGRESS_AUTO ||
		    (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_MAP && d->av_type != FI_AV_TABLE) ||
		    d->cq_data_size > 8 || (d->caps & ~(FI_LOCAL_COMM | FI_REMOTE_COMM)) || d->auth_key_size)
			return 0;
	}
	if (h->fabric_attr && h->fabric_attr->name && strcmp(h->fabric_attr->name, "floor"))
		return 0;
	return 1;
}

static void *zalloc(size_t n)
{
	return calloc(1, n < 1024 ? 1024 : n); /* padded: the core may be newer than our headers */
}

static int floor_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
			 const struct fi_info *hints, struct fi_info **info)
{
	struct fi_info *fi;
#ifdef FLOOR_TRACE
	if (hints)
		LOG("getinfo api %u.%u caps 0x%llx mode 0x%llx ep %d av %d threading %d mr_mode 0x%x "
		    "cq_data_size %zu tx op_flags 0x%llx msg_order 0x%llx\n", PID FI_MAJOR(version),
		    FI_MINOR(version), (unsigned long long)hints->caps, (unsigned long long)hints->mode,
		    hints->ep_attr ? (int)hints->ep_attr->type : -1,
		    hints->domain_attr ? (int)hints->domain_attr->av_type : -1,
		    hints->domain_attr ? (int)hints->domain_attr->threading : -1,
		    hints->domain_attr ? hints->domain_attr->mr_mode : -1,
		    hints->domain_attr ? hints->domain_attr->cq_data_size : 0,
		    hints->tx_attr ? (unsigned long long)hints->tx_attr->op_flags : 0ull,
		    hints->tx_attr ? (unsigned long long)hints->tx_attr->msg_order : 0ull);
#endif
	if (!hints_ok(hints))
		return -FI_ENODATA;
	fi = zalloc(sizeof *fi);
	if (!fi)
		return -FI_ENOMEM;
	fi->tx_attr = zalloc(sizeof *fi->tx_attr);
	fi->rx_attr = zalloc(sizeof *fi->rx_attr);
	fi->ep_attr = zalloc(sizeof *fi->ep_attr);
	fi->domain_attr = zalloc(sizeof *fi->domain_attr);
	fi->fabric_attr = zalloc(sizeof *fi->fabric_attr);
	if (!fi->tx_attr || !fi->rx_attr || !fi->ep_attr || !fi->domain_attr || !fi->fabric_attr)
		goto nomem;
	fi->domain_attr->name = strdup("floor");
	fi->fabric_attr->name = strdup("floor");
	if (!fi->domain_attr->name || !fi->fabric_attr->name)
		goto nomem;
	fi->caps = CAPS;
	fi->addr_format = FI_FORMAT_UNSPEC;
	fi->tx_attr->caps = fi->rx_attr->caps = CAPS;
	fi->tx_attr->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags : 0;
	fi->rx_attr->op_flags = hints && hints->rx_attr ? hints->rx_attr->op_flags : 0;
	fi->tx_attr->msg_order = fi->rx_attr->msg_order = FI_ORDER_SAS;
	fi->tx_attr->comp_order = fi->rx_attr->comp_order = FI_ORDER_NONE;
	fi->tx_attr->inject_size = INJECT;
	fi->tx_attr->size = fi->rx_attr->size = 1024;
	fi->tx_attr->iov_limit = fi->rx_attr->iov_limit = 1;
	fi->ep_attr->type = FI_EP_RDM;
	fi->ep_attr->protocol_version = 1;
	fi->ep_attr->max_msg_size = MAX_MSG;
	fi->ep_attr->mem_tag_format = ~0ull;
	fi->ep_attr->tx_ctx_cnt = fi->ep_attr->rx_ctx_cnt = 1;
	fi->domain_attr->threading = FI_THREAD_DOMAIN;
	fi->domain_attr->control_progress = fi->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	fi->domain_attr->resource_mgmt = FI_RM_ENABLED;
	fi->domain_attr->av_type = hints && hints->domain_attr && hints->domain_attr->av_type == FI_AV_TABLE ?
				   FI_AV_TABLE : FI_AV_MAP;
	fi->domain_attr->mr_mode = 0;
	fi->domain_attr->mr_key_size = 8;
	fi->domain_attr->cq_data_size = 8;
	fi->domain_attr->cq_cnt = fi->domain_attr->ep_cnt = 256;
	fi->domain_attr->tx_ctx_cnt = fi->domain_attr->rx_ctx_cnt = 256;
	fi->domain_attr->max_ep_tx_ctx = fi->domain_attr->max_ep_rx_ctx = 1;
	fi->domain_attr->mr_iov_limit = 1;
	fi->domain_attr->mr_cnt = 1 << 16;
	fi->domain_attr->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
	fi->fabric_attr->prov_version = floor_prov.version;
	*info = fi;
	return 0;
nomem:
	free(fi->tx_attr);
	free(fi->rx_attr);
	free(fi->ep_attr);
	if (fi->domain_attr)
		free(fi->domain_attr->name);
	free(fi->domain_attr);
	if (fi->fabric_attr)
		free(fi->fabric_attr->name);
	free(fi->fabric_attr);
	free(fi);
	return -FI_ENOMEM;
}

static void floor_cleanup(void)
{
}

/* ---- everything we do not do ---- */
#define NOSYS(ret, name, ...) \
	static ret name(__VA_ARGS__) { LOG("%s: not supported\n", PID #name); return -FI_ENOSYS; }
NOSYS(int, x_bind, struct fid *f, struct fid *b, uint64_t flags)
NOSYS(int, x_control, struct fid *f, int cmd, void *arg)
NOSYS(int, x_ops_open, struct fid *f, const char *name, uint64_t flags, void **ops, void *ctx)
NOSYS(int, x_tostr, const struct fid *f, char *buf, size_t len)
NOSYS(int, x_ops_set, struct fid *f, const char *name, uint64_t flags, void *ops, void *ctx)
NOSYS(int, x_passive_ep, struct fid_fabric *f, struct fi_info *i, struct fid_pep **p, void *c)
NOSYS(int, x_eq_open, struct fid_fabric *f, struct fi_eq_attr *a, struct fid_eq **e, void *c)
NOSYS(int, x_wait_open, struct fid_fabric *f, struct fi_wait_attr *a, struct fid_wait **w)
NOSYS(int, x_trywait, struct fid_fabric *f, struct fid **fids, int count)
NOSYS(int, x_domain2, struct fid_fabric *f, struct fi_info *i, struct fid_domain **d, uint64_t fl, void *c)
NOSYS(int, x_scalable_ep, struct fid_domain *d, struct fi_info *i, struct fid_ep **e, void *c)
NOSYS(int, x_cntr_open, struct fid_domain *d, struct fi_cntr_attr *a, struct fid_cntr **n, void *c)
NOSYS(int, x_poll_open, struct fid_domain *d, struct fi_poll_attr *a, struct fid_poll **p)
NOSYS(int, x_stx_ctx, struct fid_domain *d, struct fi_tx_attr *a, struct fid_stx **s, void *c)
NOSYS(int, x_srx_ctx, struct fid_domain *d, struct fi_rx_attr *a, struct fid_ep **e, void *c)
NOSYS(int, x_query_atomic, struct fid_domain *d, enum fi_datatype t, enum fi_op o, struct fi_atomic_attr *a,
      uint64_t fl)
NOSYS(int, x_query_coll, struct fid_domain *d, enum fi_collective_op o, struct fi_collective_attr *a,
      uint64_t fl)
NOSYS(int, x_endpoint2, struct fid_domain *d, struct fi_info *i, struct fid_ep **e, uint64_t fl, void *c)
NOSYS(int, x_insertsvc, struct fid_av *a, const char *n, const char *s, fi_addr_t *f, uint64_t fl, void *c)
NOSYS(int, x_insertsym, struct fid_av *a, const char *n, size_t nc, const char *s, size_t sc, fi_addr_t *f,
      uint64_t fl, void *c)
NOSYS(int, x_av_set, struct fid_av *a, struct fi_av_set_attr *at, struct fid_av_set **s, void *c)
NOSYS(ssize_t, x_sread, struct fid_cq *q, void *b, size_t n, const void *cond, int t)
NOSYS(ssize_t, x_sreadfrom, struct fid_cq *q, void *b, size_t n, fi_addr_t *s, const void *cond, int t)
NOSYS(int, x_signal, struct fid_cq *q)
NOSYS(int, x_tx_ctx, struct fid_ep *s, int i, struct fi_tx_attr *a, struct fid_ep **e, void *c)
NOSYS(int, x_rx_ctx, struct fid_ep *s, int i, struct fi_rx_attr *a, struct fid_ep **e, void *c)
NOSYS(int, x_setname, fid_t f, void *a, size_t l)
NOSYS(int, x_getpeer, struct fid_ep *e, void *a, size_t *l)
NOSYS(int, x_connect, struct fid_ep *e, const void *a, const void *p, size_t l)
NOSYS(int, x_listen, struct fid_pep *p)
NOSYS(int, x_accept, struct fid_ep *e, const void *p, size_t l)
NOSYS(int, x_reject, struct fid_pep *pe, fid_t h, const void *p, size_t l)
NOSYS(int, x_shutdown, struct fid_ep *e, uint64_t fl)
NOSYS(int, x_join, struct fid_ep *e, const void *a, uint64_t fl, struct fid_mc **m, void *c)
NOSYS(ssize_t, m_recv, struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t s, void *c)
NOSYS(ssize_t, m_recvv, struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t s, void *c)
NOSYS(ssize_t, m_recvmsg, struct fid_ep *e, const struct fi_msg *m, uint64_t fl)
NOSYS(ssize_t, m_send, struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, void *c)
NOSYS(ssize_t, m_sendv, struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t a, void *c)
NOSYS(ssize_t, m_sendmsg, struct fid_ep *e, const struct fi_msg *m, uint64_t fl)
NOSYS(ssize_t, m_inject, struct fid_ep *e, const void *b, size_t l, fi_addr_t a)
NOSYS(ssize_t, m_senddata, struct fid_ep *e, const void *b, size_t l, void *d, uint64_t x, fi_addr_t a, void *c)
NOSYS(ssize_t, m_injectdata, struct fid_ep *e, const void *b, size_t l, uint64_t x, fi_addr_t a)
NOSYS(ssize_t, r_read, struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t s, uint64_t a, uint64_t k,
      void *c)
NOSYS(ssize_t, r_readv, struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t s, uint64_t a,
      uint64_t k, void *c)
NOSYS(ssize_t, r_readmsg, struct fid_ep *e, const struct fi_msg_rma *m, uint64_t fl)
NOSYS(ssize_t, r_write, struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t s, uint64_t a,
      uint64_t k, void *c)
NOSYS(ssize_t, r_writev, struct fid_ep *e, const struct iovec *v, void **d, size_t n, fi_addr_t s,
      uint64_t a, uint64_t k, void *c)
NOSYS(ssize_t, r_writemsg, struct fid_ep *e, const struct fi_msg_rma *m, uint64_t fl)
NOSYS(ssize_t, r_inject, struct fid_ep *e, const void *b, size_t l, fi_addr_t s, uint64_t a, uint64_t k)
NOSYS(ssize_t, r_writedata, struct fid_ep *e, const void *b, size_t l, void *d, uint64_t x, fi_addr_t s,
      uint64_t a, uint64_t k, void *c)
NOSYS(ssize_t, r_injectdata, struct fid_ep *e, const void *b, size_t l, uint64_t x, fi_addr_t s, uint64_t a,
      uint64_t k)
NOSYS(ssize_t, a_write, struct fid_ep *e, const void *b, size_t n, void *d, fi_addr_t s, uint64_t a,
      uint64_t k, enum fi_datatype t, enum fi_op o, void *c)
NOSYS(ssize_t, a_writev, struct fid_ep *e, const struct fi_ioc *v, void **d, size_t n, fi_addr_t s,
      uint64_t a, uint64_t k, enum fi_datatype t, enum fi_op o, void *c)
NOSYS(ssize_t, a_writemsg, struct fid_ep *e, const struct fi_msg_atomic *m, uint64_t fl)
NOSYS(ssize_t, a_inject, struct fid_ep *e, const void *b, size_t n, fi_addr_t s, uint64_t a, uint64_t k,
      enum fi_datatype t, enum fi_op o)
NOSYS(ssize_t, a_readwrite, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd,
      fi_addr_t s, uint64_t a, uint64_t k, enum fi_datatype t, enum fi_op o, void *c)
NOSYS(ssize_t, a_readwritev, struct fid_ep *e, const struct fi_ioc *v, void **d, size_t n,
      struct fi_ioc *rv, void **rd, size_t rn, fi_addr_t s, uint64_t a, uint64_t k, enum fi_datatype t,
      enum fi_op o, void *c)
NOSYS(ssize_t, a_readwritemsg, struct fid_ep *e, const struct fi_msg_atomic *m, struct fi_ioc *rv,
      void **rd, size_t rn, uint64_t fl)
NOSYS(ssize_t, a_compwrite, struct fid_ep *e, const void *b, size_t n, void *d, const void *cmp, void *cd,
      void *r, void *rd, fi_addr_t s, uint64_t a, uint64_t k, enum fi_datatype t, enum fi_op o, void *c)
NOSYS(ssize_t, a_compwritev, struct fid_ep *e, const struct fi_ioc *v, void **d, size_t n,
      const struct fi_ioc *cv, void **cd, size_t cn, struct fi_ioc *rv, void **rd, size_t rn, fi_addr_t s,
      uint64_t a, uint64_t k, enum fi_datatype t, enum fi_op o, void *c)
NOSYS(ssize_t, a_compwritemsg, struct fid_ep *e, const struct fi_msg_atomic *m, const struct fi_ioc *cv,
      void **cd, size_t cn, struct fi_ioc *rv, void **rd, size_t rn, uint64_t fl)
NOSYS(int, a_writevalid, struct fid_ep *e, enum fi_datatype t, enum fi_op o, size_t *n)
NOSYS(int, a_readwritevalid, struct fid_ep *e, enum fi_datatype t, enum fi_op o, size_t *n)
NOSYS(int, a_compwritevalid, struct fid_ep *e, enum fi_datatype t, enum fi_op o, size_t *n)
NOSYS(ssize_t, c_barrier, struct fid_ep *e, fi_addr_t ca, void *c)
NOSYS(ssize_t, c_broadcast, struct fid_ep *e, void *b, size_t n, void *d, fi_addr_t ca, fi_addr_t r,
      enum fi_datatype t, uint64_t fl, void *c)
NOSYS(ssize_t, c_alltoall, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd,
      fi_addr_t ca, enum fi_datatype t, uint64_t fl, void *c)
NOSYS(ssize_t, c_allreduce, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd,
      fi_addr_t ca, enum fi_datatype t, enum fi_op o, uint64_t fl, void *c)
NOSYS(ssize_t, c_allgather, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd,
      fi_addr_t ca, enum fi_datatype t, uint64_t fl, void *c)
NOSYS(ssize_t, c_reduce_scatter, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd,
      fi_addr_t ca, enum fi_datatype t, enum fi_op o, uint64_t fl, void *c)
NOSYS(ssize_t, c_reduce, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd, fi_addr_t ca,
      fi_addr_t ra, enum fi_datatype t, enum fi_op o, uint64_t fl, void *c)
NOSYS(ssize_t, c_scatter, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd, fi_addr_t ca,
      fi_addr_t ra, enum fi_datatype t, uint64_t fl, void *c)
NOSYS(ssize_t, c_gather, struct fid_ep *e, const void *b, size_t n, void *d, void *r, void *rd, fi_addr_t ca,
      fi_addr_t ra, enum fi_datatype t, uint64_t fl, void *c)
NOSYS(ssize_t, c_msg, struct fid_ep *e, const struct fi_msg_collective *m, struct fi_ioc *rv, void **rd,
      size_t rn, uint64_t fl)
NOSYS(ssize_t, c_barrier2, struct fid_ep *e, fi_addr_t ca, uint64_t fl, void *c)

#define FI_OPS(close_fn, bind_fn, control_fn) \
	{ .size = sizeof(struct fi_ops), .close = close_fn, .bind = bind_fn, .control = control_fn, \
	  .ops_open = x_ops_open, .tostr = x_tostr, .ops_set = x_ops_set }
static struct fi_ops fab_fi_ops = FI_OPS(fab_close, x_bind, x_control);
static struct fi_ops dom_fi_ops = FI_OPS(dom_close, x_bind, x_control);
static struct fi_ops mr_fi_ops = FI_OPS(mr_close, x_bind, x_control);
static struct fi_ops av_fi_ops = FI_OPS(av_close, x_bind, x_control);
static struct fi_ops cq_fi_ops = FI_OPS(cq_close, x_bind, x_control);
static struct fi_ops ep_fi_ops = FI_OPS(ep_close, ep_bind, ep_control);
static struct fi_ops_fabric fab_ops = { sizeof(struct fi_ops_fabric), fab_domain, x_passive_ep, x_eq_open,
					x_wait_open, x_trywait, x_domain2 };
static struct fi_ops_domain dom_ops = { sizeof(struct fi_ops_domain), dom_av_open, dom_cq_open, dom_endpoint,
					x_scalable_ep, x_cntr_open, x_poll_open, x_stx_ctx, x_srx_ctx,
					x_query_atomic, x_query_coll, x_endpoint2 };
static struct fi_ops_mr mr_ops = { sizeof(struct fi_ops_mr), mr_reg, mr_regv, mr_regattr };
static struct fi_ops_av av_ops = { sizeof(struct fi_ops_av), av_insert, x_insertsvc, x_insertsym, av_remove,
				   av_lookup, av_straddr, x_av_set };
static struct fi_ops_cq cq_ops = { sizeof(struct fi_ops_cq), cq_read, cq_readfrom, cq_readerr, x_sread,
				   x_sreadfrom, x_signal, cq_strerror };
static struct fi_ops_ep ep_ops = { sizeof(struct fi_ops_ep), ep_cancel, ep_getopt, ep_setopt, x_tx_ctx,
				   x_rx_ctx, ep_size_left, ep_size_left };
static struct fi_ops_cm cm_ops = { sizeof(struct fi_ops_cm), x_setname, ep_getname, x_getpeer, x_connect,
				   x_listen, x_accept, x_reject, x_shutdown, x_join };
static struct fi_ops_msg msg_ops = { sizeof(struct fi_ops_msg), m_recv, m_recvv, m_recvmsg, m_send, m_sendv,
				     m_sendmsg, m_inject, m_senddata, m_injectdata };
static struct fi_ops_rma rma_ops = { sizeof(struct fi_ops_rma), r_read, r_readv, r_readmsg, r_write,
				     r_writev, r_writemsg, r_inject, r_writedata, r_injectdata };
static struct fi_ops_tagged tagged_ops = { sizeof(struct fi_ops_tagged), t_recv, t_recvv, t_recvmsg, t_send,
					   t_sendv, t_sendmsg, t_inject, t_senddata, t_injectdata };
static struct fi_ops_atomic atomic_ops = { sizeof(struct fi_ops_atomic), a_write, a_writev, a_writemsg,
					   a_inject, a_readwrite, a_readwritev, a_readwritemsg, a_compwrite,
					   a_compwritev, a_compwritemsg, a_writevalid, a_readwritevalid,
					   a_compwritevalid };
static struct fi_ops_collective coll_ops = { sizeof(struct fi_ops_collective), c_barrier, c_broadcast,
					     c_alltoall, c_allreduce, c_allgather, c_reduce_scatter, c_reduce,
					     c_scatter, c_gather, c_msg, c_barrier2 };

/* writable: the core stores its context in it */
static struct fi_provider floor_prov = {
	.version = FI_VERSION(0, 1),
	.fi_version = FI_VERSION(1, 17),
	.name = "floor",
	.getinfo = floor_getinfo,
	.fabric = floor_fabric,
	.cleanup = floor_cleanup,
};

FI_EXT_INI
{
	return &floor_prov;
}
