/* tests/device/test_profiles.c — every built-in profile loads with sane figures
 * (and matches its name), and bad profile text is refused with a message that
 * names the line and what is wrong. */
#include "device/internal.h"
#include "tests/test.h"

#include <string.h>

static void bad(const char *text, const char *want)
{
	struct dev_profile p;
	memset(&p, 0x5a, sizeof(p));
	struct dev_profile before = p;
	CHECK(dev_profile_parse(text, "t", &p) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), want), "message '%s' lacks '%s'", sp_last_error(), want);
	CHECK(memcmp(&p, &before, sizeof(p)) == 0); /* untouched on failure */
}

#define BASE                                                                                    \
	"name = t\ndevice = d\ndevices = 2\nmemory = 8G\nflops = 10 TFLOP/s\nmem_bw = 1 TB/s\n" \
	"h2d = 12 GB/s\nd2h = 12 GB/s\nhost_link = 12 GB/s\np2p = 0\ndisk = 2 GB/s\n"

int main(void)
{
	const char *const *names = dev_profile_builtin_names();
	int n = 0;
	for (; names[n]; n++) {
		struct dev_profile p;
		CHECK_OK(dev_profile_load(names[n], &p));
		CHECK_MSG(strcmp(p.name, names[n]) == 0, "%s says it is %s", names[n], p.name);
		CHECK(p.ndevices >= 1 && p.device_mem >= (1ull << 30));
		CHECK(p.flops > 1e12 && p.mem_bw > 1e11 && p.h2d_bw > 1e9 && p.host_bw > 1e9);
		CHECK(p.ndevices == 1 || p.p2p_bw > 0);
		printf("%-16s %d x %-22s %5.1f TFLOP/s  H2D %5.1f GB/s  host %5.1f GB/s  p2p %5.1f "
		       "GB/s\n",
		       p.name, p.ndevices, p.device_name, p.flops / 1e12, p.h2d_bw / 1e9,
		       p.host_bw / 1e9, p.p2p_bw / 1e9);
	}
	CHECK(n >= 4);

	struct dev_profile p;
	CHECK_OK(dev_profile_parse(BASE "launch_latency = 5 us # comment\n", "t", &p));
	CHECK(p.device_mem == 8ull << 30 && p.flops == 10e12);
	CHECK(p.launch_lat > 4.999e-6 && p.launch_lat < 5.001e-6);
	CHECK(p.nspeed == 0 && p.cpu_flops == 0.5e12 && p.cpu_mem_bw == 20e9); /* defaults */
	/* per-device speed: a device half as fast has half the FLOP/s and bandwidth */
	CHECK_OK(dev_profile_parse(BASE "speed = 1, 0.5\ncpu_mem_bw = 40 GB/s\n", "t", &p));
	CHECK(p.nspeed == 2 && p.speed[0] == 1 && p.speed[1] == 0.5 && p.cpu_mem_bw == 40e9);
	bad(BASE "speed = 1, 0\n", "speed");
	bad(BASE "speed = 1; 2\n", "speed");
	bad(BASE "flop = 1\n", "t:12: unknown key 'flop'");
	bad("name = t\n", "missing key 'device'");
	bad(BASE "h2d = 12 GB\n", "unknown unit 'GB'");
	bad(BASE "devices = 0\n", "devices = '0' must be 1..16");
	bad(BASE "memory = lots\n", "memory = 'lots' is not a size");
	bad(BASE "flops = -1\n", "not a non-negative number");
	bad(BASE "just words\n", "expected 'key = value'");
	CHECK(dev_profile_load("no-such", &p) == -EINVAL);
	CHECK(strstr(sp_last_error(), "gtx1080ti-x4"));
	CHECK(dev_profile_load("/nonexistent/x.prof", &p) == -ENOENT);

	/* dev_profile_text: a model context opened from an open context's text sees
	 * the same devices and links (the planner simulates a context this way) */
	for (int b = 0; b < 2; b++) {
		struct dev_config c = {.backend = b ? DEV_BACKEND_HOST : DEV_BACKEND_MODEL,
		                       .profile = "gtx1080ti-x4-mixed",
		                       .ndevices = b ? 2 : 0,
		                       .device_mem = b ? 64ull << 20 : 0};
		struct dev_ctx *a, *m;
		CHECK_OK(dev_open(&c, &a));
		char text[2048];
		CHECK(dev_profile_text(a, text, 16) == -ENOSPC);
		CHECK_OK(dev_profile_text(a, text, sizeof(text)));
		struct dev_config mc = {.backend = DEV_BACKEND_MODEL, .profile_text = text};
		CHECK_MSG(dev_open(&mc, &m) == 0, "%s\n%s", sp_last_error(), text);
		CHECK(dev_count(m) == dev_count(a));
		for (int d = 0; d < dev_count(a); d++) {
			struct dev_info x, y;
			CHECK_OK(dev_info(a, d, &x));
			CHECK_OK(dev_info(m, d, &y));
			CHECK_MSG(x.capacity == y.capacity && x.flops == y.flops &&
			              x.mem_bw == y.mem_bw && strcmp(x.name, y.name) == 0,
			          "device %d: %s", d, text);
			for (int e = -2; e < dev_count(a); e++)
				CHECK(dev_link_bw(a, d, e) == dev_link_bw(m, d, e) &&
				      dev_link_bw(a, e, d) == dev_link_bw(m, e, d));
		}
		CHECK(dev_host_link_bw(a) == dev_host_link_bw(m));
		dev_close(m);
		dev_close(a);
	}
	TEST_PASS();
}
