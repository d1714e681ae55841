//! The operations doorbell does not offer (RMA, atomics, collectives,
//! connection management): callers reach them through inline wrappers
//! that call the table pointers unchecked, so each is a real function
//! that answers -FI_ENOSYS.

use crate::sys::*;
use crate::util::{Table, ENOSYS, ENOSYS_S};
use std::os::raw::{c_int, c_void};

macro_rules! enosys {
    ($($name:ident ( $($t:ty),* ) -> $r:ty = $v:expr;)*) => {
        $(unsafe extern "C" fn $name($(_: $t),*) -> $r { $v })*
    };
}

type Ep = *mut fid_ep;
type A = fi_addr_t;
type V = *mut c_void;
type C = *const c_void;
type Dt = fi_datatype;
type Op = fi_op;
type Io = *const fi_ioc;
type IoM = *mut fi_ioc;
type Ds = *mut *mut c_void;

enosys! {
    rma_read(Ep, V, usize, V, A, u64, u64, V) -> isize = ENOSYS_S;
    rma_readv(Ep, *const iovec, Ds, usize, A, u64, u64, V) -> isize = ENOSYS_S;
    rma_readmsg(Ep, *const fi_msg_rma, u64) -> isize = ENOSYS_S;
    rma_write(Ep, C, usize, V, A, u64, u64, V) -> isize = ENOSYS_S;
    rma_writev(Ep, *const iovec, Ds, usize, A, u64, u64, V) -> isize = ENOSYS_S;
    rma_writemsg(Ep, *const fi_msg_rma, u64) -> isize = ENOSYS_S;
    rma_inject(Ep, C, usize, A, u64, u64) -> isize = ENOSYS_S;
    rma_writedata(Ep, C, usize, V, u64, A, u64, u64, V) -> isize = ENOSYS_S;
    rma_injectdata(Ep, C, usize, u64, A, u64, u64) -> isize = ENOSYS_S;

    at_write(Ep, C, usize, V, A, u64, u64, Dt, Op, V) -> isize = ENOSYS_S;
    at_writev(Ep, Io, Ds, usize, A, u64, u64, Dt, Op, V) -> isize = ENOSYS_S;
    at_writemsg(Ep, *const fi_msg_atomic, u64) -> isize = ENOSYS_S;
    at_inject(Ep, C, usize, A, u64, u64, Dt, Op) -> isize = ENOSYS_S;
    at_readwrite(Ep, C, usize, V, V, V, A, u64, u64, Dt, Op, V) -> isize = ENOSYS_S;
    at_readwritev(Ep, Io, Ds, usize, IoM, Ds, usize, A, u64, u64, Dt, Op, V) -> isize = ENOSYS_S;
    at_readwritemsg(Ep, *const fi_msg_atomic, IoM, Ds, usize, u64) -> isize = ENOSYS_S;
    at_compwrite(Ep, C, usize, V, C, V, V, V, A, u64, u64, Dt, Op, V) -> isize = ENOSYS_S;
    at_compwritev(Ep, Io, Ds, usize, Io, Ds, usize, IoM, Ds, usize, A, u64, u64, Dt, Op, V) -> isize = ENOSYS_S;
    at_compwritemsg(Ep, *const fi_msg_atomic, Io, Ds, usize, IoM, Ds, usize, u64) -> isize = ENOSYS_S;
    at_valid(Ep, Dt, Op, *mut usize) -> c_int = ENOSYS;

    co_barrier(Ep, A, V) -> isize = ENOSYS_S;
    co_broadcast(Ep, V, usize, V, A, A, Dt, u64, V) -> isize = ENOSYS_S;
    co_alltoall(Ep, C, usize, V, V, V, A, Dt, u64, V) -> isize = ENOSYS_S;
    co_allreduce(Ep, C, usize, V, V, V, A, Dt, Op, u64, V) -> isize = ENOSYS_S;
    co_allgather(Ep, C, usize, V, V, V, A, Dt, u64, V) -> isize = ENOSYS_S;
    co_reduce_scatter(Ep, C, usize, V, V, V, A, Dt, Op, u64, V) -> isize = ENOSYS_S;
    co_reduce(Ep, C, usize, V, V, V, A, A, Dt, Op, u64, V) -> isize = ENOSYS_S;
    co_scatter(Ep, C, usize, V, V, V, A, A, Dt, u64, V) -> isize = ENOSYS_S;
    co_gather(Ep, C, usize, V, V, V, A, A, Dt, u64, V) -> isize = ENOSYS_S;
    co_msg(Ep, *const fi_msg_collective, IoM, Ds, usize, u64) -> isize = ENOSYS_S;
    co_barrier2(Ep, A, u64, V) -> isize = ENOSYS_S;

    cm_setname(fid_t, V, usize) -> c_int = ENOSYS;
    cm_getpeer(Ep, V, *mut usize) -> c_int = ENOSYS;
    cm_connect(Ep, C, C, usize) -> c_int = ENOSYS;
    cm_listen(*mut fid_pep) -> c_int = ENOSYS;
    cm_accept(Ep, C, usize) -> c_int = ENOSYS;
    cm_reject(*mut fid_pep, fid_t, C, usize) -> c_int = ENOSYS;
    cm_shutdown(Ep, u64) -> c_int = ENOSYS;
    cm_join(Ep, C, u64, *mut *mut fid_mc, V) -> c_int = ENOSYS;

    fid_bind(*mut fid, *mut fid, u64) -> c_int = ENOSYS;
    fid_control(*mut fid, c_int, V) -> c_int = ENOSYS;
    fid_ops_open(*mut fid, *const std::os::raw::c_char, u64, *mut *mut c_void, V) -> c_int = ENOSYS;
    fid_tostr(*const fid, *mut std::os::raw::c_char, usize) -> c_int = ENOSYS;
    fid_ops_set(*mut fid, *const std::os::raw::c_char, u64, V, V) -> c_int = ENOSYS;
}

/// A fid's fi_ops with this close and the rest answering -FI_ENOSYS.
pub const fn fid_ops(close: unsafe extern "C" fn(*mut fid) -> c_int) -> fi_ops {
    fi_ops {
        size: std::mem::size_of::<fi_ops>(),
        close: Some(close),
        bind: Some(fid_bind),
        control: Some(fid_control),
        ops_open: Some(fid_ops_open),
        tostr: Some(fid_tostr),
        ops_set: Some(fid_ops_set),
    }
}

/// fi_ops with a real control.
pub const fn fid_ops_control(
    close: unsafe extern "C" fn(*mut fid) -> c_int,
    control: unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int,
) -> fi_ops {
    fi_ops { control: Some(control), ..fid_ops(close) }
}

/// fi_ops with real bind and control.
pub const fn fid_ops_full(
    close: unsafe extern "C" fn(*mut fid) -> c_int,
    bind: unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int,
    control: unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int,
) -> fi_ops {
    fi_ops { bind: Some(bind), control: Some(control), ..fid_ops(close) }
}

pub static RMA: Table<fi_ops_rma> = Table(fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
});

pub static ATOMIC: Table<fi_ops_atomic> = Table(fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(at_write),
    writev: Some(at_writev),
    writemsg: Some(at_writemsg),
    inject: Some(at_inject),
    readwrite: Some(at_readwrite),
    readwritev: Some(at_readwritev),
    readwritemsg: Some(at_readwritemsg),
    compwrite: Some(at_compwrite),
    compwritev: Some(at_compwritev),
    compwritemsg: Some(at_compwritemsg),
    writevalid: Some(at_valid),
    readwritevalid: Some(at_valid),
    compwritevalid: Some(at_valid),
});

pub static COLLECTIVE: Table<fi_ops_collective> = Table(fi_ops_collective {
    size: std::mem::size_of::<fi_ops_collective>(),
    barrier: Some(co_barrier),
    broadcast: Some(co_broadcast),
    alltoall: Some(co_alltoall),
    allreduce: Some(co_allreduce),
    allgather: Some(co_allgather),
    reduce_scatter: Some(co_reduce_scatter),
    reduce: Some(co_reduce),
    scatter: Some(co_scatter),
    gather: Some(co_gather),
    msg: Some(co_msg),
    barrier2: Some(co_barrier2),
});

/// The connection-management table with a real getname.
pub const fn cm_ops(getname: unsafe extern "C" fn(fid_t, *mut c_void, *mut usize) -> c_int) -> fi_ops_cm {
    fi_ops_cm {
        size: std::mem::size_of::<fi_ops_cm>(),
        setname: Some(cm_setname),
        getname: Some(getname),
        getpeer: Some(cm_getpeer),
        connect: Some(cm_connect),
        listen: Some(cm_listen),
        accept: Some(cm_accept),
        reject: Some(cm_reject),
        shutdown: Some(cm_shutdown),
        join: Some(cm_join),
    }
}
