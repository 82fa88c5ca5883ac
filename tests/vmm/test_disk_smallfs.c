/* tests/vmm/test_disk_smallfs.c — the disk tier on a really small filesystem:
 * a 24 MiB ext4 image on a loop device and an 8 MiB tmpfs, mounted for the test
 * (needs root and mount permission; skips with 77 otherwise). With a capacity
 * larger than the filesystem, writes run until the filesystem itself says ENOSPC:
 * the failed write reaches its ticket, its source stays intact, every extent
 * written before reads back bit for bit, and freeing extents (hole punching)
 * makes room for the failed write to succeed. With capacity 0 the tier takes the
 * free space as its capacity and refuses extents beyond it at alloc time. On
 * ramfs, which refuses O_DIRECT, the tier falls back to buffered I/O. */
#include "common/error.h"
#include "tests/test.h"
#include "vmm/disk.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[256], img[300], mnt[300];
static int mounted;

/* Unmounts mnt, retrying briefly (the kernel may drop file references late). */
static int do_umount(void)
{
	for (int i = 0; i < 100; i++) {
		if (umount2(mnt, 0) == 0)
			return 0;
		if (errno != EBUSY)
			return -errno;
		usleep(20000);
	}
	return -EBUSY;
}

static void cleanup(void)
{
	if (mounted && do_umount() != 0)
		umount2(mnt, MNT_DETACH);
	mounted = 0;
	unlink(img);
	rmdir(mnt);
	rmdir(base);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		p[i] = (uint8_t)s;
	}
}

static int write_sync(struct vmm_disk *d, uint64_t e, const void *src, size_t n)
{
	uint64_t t;
	CHECK_OK(vmm_disk_write_async(d, e, src, n, &t));
	int rc = vmm_disk_wait(d, t);
	vmm_disk_ticket_release(d, t);
	return rc;
}

static int read_sync(struct vmm_disk *d, uint64_t e, void *dst, size_t n)
{
	uint64_t t;
	CHECK_OK(vmm_disk_read_async(d, e, dst, n, &t));
	int rc = vmm_disk_wait(d, t);
	vmm_disk_ticket_release(d, t);
	return rc;
}

/* Fills the filesystem at mnt until ENOSPC; checks that nothing was lost. */
static void fill_until_full(const char *what, uint64_t fs_bytes)
{
	enum { EXT = 1 << 20, MAXE = 128 };
	struct vmm_disk_config cfg = {.path = mnt,
	                              .capacity = 1ull << 30, /* more than the filesystem */
	                              .queue_depth = 8,
	                              .block = 65536,
	                              .fault = ""};
	struct vmm_disk *d = NULL;
	int rc = vmm_disk_open(&cfg, &d);
	if (rc == -ENOTSUP)
		TEST_SKIP("%s", sp_last_error());
	CHECK_OK(rc);
	uint8_t *src = malloc((size_t)MAXE * EXT), *dst = malloc(EXT), *keep = malloc(EXT);
	CHECK(src && dst && keep);
	fill(src, (size_t)MAXE * EXT, 42);
	uint64_t e[MAXE];
	int n = 0, failed = -1;
	for (; n < MAXE; n++) {
		CHECK_OK(vmm_disk_alloc(d, EXT, &e[n]));
		uint8_t *s = src + (size_t)n * EXT;
		memcpy(keep, s, EXT);
		rc = write_sync(d, e[n], s, EXT);
		if (rc != 0) {
			CHECK_MSG(rc == -ENOSPC, "%s: write %d: rc %d: %s", what, n, rc,
			          sp_last_error());
			CHECK_MSG(strstr(sp_last_error(), "No space left"), "%s: message: %s", what,
			          sp_last_error());
			CHECK_MSG(memcmp(keep, s, EXT) == 0, "%s: source changed by a failed write",
			          what);
			failed = n;
			break;
		}
	}
	CHECK_MSG(failed > 0, "%s: %d MiB written to a %llu MiB filesystem without ENOSPC", what, n,
	          (unsigned long long)(fs_bytes >> 20));
	for (int i = 0; i < failed; i++) {
		CHECK_OK(read_sync(d, e[i], dst, EXT));
		CHECK_MSG(memcmp(dst, src + (size_t)i * EXT, EXT) == 0, "%s: extent %d differs",
		          what, i);
	}
	/* Free two written extents: their space comes back, the failed write fits. */
	CHECK_OK(vmm_disk_free(d, e[0]));
	CHECK_OK(vmm_disk_free(d, e[1]));
	CHECK_OK(write_sync(d, e[failed], src + (size_t)failed * EXT, EXT));
	CHECK_OK(read_sync(d, e[failed], dst, EXT));
	CHECK(memcmp(dst, src + (size_t)failed * EXT, EXT) == 0);
	printf("%s: ENOSPC after %d MiB of %llu MiB; freed space reused\n", what, failed,
	       (unsigned long long)(fs_bytes >> 20));
	vmm_disk_close(d);

	/* capacity 0: the free space is the capacity, enforced at alloc. */
	cfg.capacity = 0;
	CHECK_OK(vmm_disk_open(&cfg, &d));
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	CHECK_MSG(st.capacity > 0 && st.capacity <= fs_bytes, "%s: capacity %llu", what,
	          (unsigned long long)st.capacity);
	uint64_t x;
	CHECK(vmm_disk_alloc(d, st.capacity + 1, &x) == -ENOSPC);
	CHECK_OK(vmm_disk_alloc(d, st.capacity / 2, &x));
	vmm_disk_close(d);
	free(src);
	free(dst);
	free(keep);
}

/* ramfs refuses O_DIRECT: the tier falls back to buffered I/O and still works. */
static void buffered_roundtrip(void)
{
	struct vmm_disk_config cfg = {
	    .path = mnt, .capacity = 64 << 20, .queue_depth = 4, .block = 65536, .fault = ""};
	struct vmm_disk *d = NULL;
	CHECK_OK(vmm_disk_open(&cfg, &d));
	enum { N = 300001 };
	uint8_t *src = malloc(N), *dst = malloc(N);
	CHECK(src && dst);
	fill(src, N, 11);
	uint64_t e;
	CHECK_OK(vmm_disk_alloc(d, N, &e));
	CHECK_OK(write_sync(d, e, src, N));
	CHECK_OK(read_sync(d, e, dst, N));
	CHECK(memcmp(src, dst, N) == 0);
	CHECK_OK(vmm_disk_free(d, e));
	vmm_disk_close(d);
	free(src);
	free(dst);
	printf("ramfs (no O_DIRECT): buffered fallback round-trips\n");
}

static int sh(const char *cmd)
{
	int rc = system(cmd);
	return rc == -1 ? -1 : WEXITSTATUS(rc);
}

int main(void)
{
	if (geteuid() != 0)
		TEST_SKIP("needs root to mount a small filesystem");
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof(base), "%s/spill-test-smallfs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(base));
	snprintf(img, sizeof(img), "%s/img", base);
	snprintf(mnt, sizeof(mnt), "%s/mnt", base);
	CHECK(mkdir(mnt, 0700) == 0);
	atexit(cleanup);
	int ran = 0;

	/* tmpfs: no block device needed. */
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=8m") == 0) {
		mounted = 1;
		fill_until_full("tmpfs 8M", 8ull << 20);
		CHECK_MSG(do_umount() == 0, "umount %s: %s", mnt, strerror(errno));
		mounted = 0;
		ran++;
	} else {
		printf("tmpfs mount not permitted (%s): skipped\n", strerror(errno));
	}

	if (mount("ramfs", mnt, "ramfs", 0, NULL) == 0) {
		mounted = 1;
		buffered_roundtrip();
		CHECK_MSG(do_umount() == 0, "umount %s: %s", mnt, strerror(errno));
		mounted = 0;
		ran++;
	}

	/* ext4 on a loop device (O_DIRECT for real). */
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
	         "truncate -s 24M '%s' && mkfs.ext4 -q -F -O ^has_journal '%s' >/dev/null 2>&1 && "
	         "mount -o loop '%s' '%s' 2>/dev/null",
	         img, img, img, mnt);
	if (sh(cmd) == 0) {
		mounted = 1;
		fill_until_full("ext4 24M (loop)", 24ull << 20);
		CHECK_MSG(do_umount() == 0, "umount %s: %s", mnt, strerror(errno));
		mounted = 0;
		ran++;
	} else {
		printf("loop-mounted ext4 not possible here: skipped\n");
	}
	if (!ran)
		TEST_SKIP("cannot mount a small filesystem here");
	TEST_PASS();
}
