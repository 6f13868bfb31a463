/* Rows read (and written) at a queue depth through io_uring: one ring per thread, every transfer of a
 * call submitted through it with up to `depth` in flight, completions reaped as they come.
 *
 * A plain C library (no Python API), built at install as the optional extension
 * harness.reference.tiered._rowio (setup.py) and loaded with ctypes by harness/reference/tiered/rowio.py, which
 * falls back to Python threads issuing pread/pwrite (and says so) where it is missing or io_uring is
 * refused. The raw system calls, not liburing: nothing to install, and the ring's protocol is
 * small (the kernel's include/uapi/linux/io_uring.h and io_uring_setup(2), io_uring_enter(2)).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct rowio_ring {
    int fd;
    unsigned entries;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_ptr, *cq_ptr;
    size_t sq_size, cq_size, sqes_size;
    int single_mmap;
};

/* A ring of at least `entries` submission slots; NULL with errno set where the kernel refuses. */
struct rowio_ring *rowio_ring_new(unsigned entries) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (fd < 0)
        return NULL;
    struct rowio_ring *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    r->fd = fd;
    r->entries = p.sq_entries;
    r->sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    r->single_mmap = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (r->single_mmap) {
        if (r->cq_size > r->sq_size)
            r->sq_size = r->cq_size;
        r->cq_size = r->sq_size;
    }
    r->sq_ptr = mmap(NULL, r->sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    if (r->sq_ptr == MAP_FAILED)
        goto fail;
    r->cq_ptr = r->single_mmap ? r->sq_ptr
                               : mmap(NULL, r->cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                                      IORING_OFF_CQ_RING);
    if (r->cq_ptr == MAP_FAILED)
        goto fail;
    r->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED)
        goto fail;
    char *sq = r->sq_ptr, *cq = r->cq_ptr;
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return r;
fail: {
    int err = errno;
    if (r->sq_ptr && r->sq_ptr != MAP_FAILED)
        munmap(r->sq_ptr, r->sq_size);
    if (!r->single_mmap && r->cq_ptr && r->cq_ptr != MAP_FAILED)
        munmap(r->cq_ptr, r->cq_size);
    close(fd);
    free(r);
    errno = err;
    return NULL;
}
}

void rowio_ring_free(struct rowio_ring *r) {
    if (!r)
        return;
    munmap(r->sqes, r->sqes_size);
    if (!r->single_mmap)
        munmap(r->cq_ptr, r->cq_size);
    munmap(r->sq_ptr, r->sq_size);
    close(r->fd);
    free(r);
}

/* Read (or, with `write`, write) `n` spans: span i is lens[i] bytes at offset offsets[i] of `fd`,
 * at buf + bufoffs[i]; at most `depth` in flight. 0 on success; -errno of the first failed transfer
 * or system call; -EIO for a short one (its index in *failed where failed is not NULL). */
int rowio_spans(struct rowio_ring *r, int fd, int write, const int64_t *offsets, const int64_t *lens,
                const int64_t *bufoffs, size_t n, char *buf, unsigned depth, int64_t *failed) {
    if (depth < 1)
        depth = 1;
    if (depth > r->entries)
        depth = r->entries;
    size_t queued = 0, done = 0;
    unsigned inflight = 0;
    int status = 0;
    while (done < n) {
        unsigned tail = *r->sq_tail; /* ours alone to write */
        while (queued < n && inflight < depth && status == 0) {
            unsigned idx = tail & *r->sq_mask;
            struct io_uring_sqe *sqe = &r->sqes[idx];
            memset(sqe, 0, sizeof *sqe);
            sqe->opcode = write ? IORING_OP_WRITE : IORING_OP_READ;
            sqe->fd = fd;
            sqe->off = (uint64_t)offsets[queued];
            sqe->addr = (uint64_t)(uintptr_t)(buf + bufoffs[queued]);
            sqe->len = (uint32_t)lens[queued];
            sqe->user_data = queued;
            r->sq_array[idx] = idx;
            tail++;
            queued++;
            inflight++;
        }
        __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE);
        if (inflight == 0)
            break; /* a failure stopped the queueing and every transfer in flight is back */
        unsigned pending = tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
        int ret = (int)syscall(__NR_io_uring_enter, r->fd, pending, 1, IORING_ENTER_GETEVENTS, NULL, 0);
        if (ret < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY)
            return -errno; /* the ring is unusable: nothing more comes back */
        unsigned head = *r->cq_head;
        while (head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
            struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
            size_t i = (size_t)cqe->user_data;
            int32_t want = (int32_t)lens[i];
            if (status == 0 && cqe->res != want) {
                status = cqe->res < 0 ? cqe->res : -EIO;
                if (failed)
                    *failed = (int64_t)i;
            }
            head++;
            done++;
            inflight--;
        }
        __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
        if (status != 0 && inflight == 0)
            break;
    }
    return status;
}
