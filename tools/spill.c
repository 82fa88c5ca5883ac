/* tools/spill.c — the `spill` command.
 *
 *   spill params [--markdown]   the SPILL_* table, or the current values
 *   spill devices               open the configured backend and list its devices
 *   spill version
 * Every error is one line on stderr and a non-zero exit.
 */
#include "common/log.h"
#include "common/params.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPILL_VERSION "0.1.0"

static int load_params(struct sp_params *p)
{
	if (sp_params_load(p, NULL) < 0 || sp_params_apply_logging(p) < 0) {
		fprintf(stderr, "spill: %s\n", sp_last_error());
		return -1;
	}
	return 0;
}

static int cmd_params(int argc, char **argv)
{
	struct sp_params p;
	if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
		sp_params_print_markdown(stdout);
		return 0;
	}
	if (load_params(&p) < 0)
		return 1;
	sp_params_print_values(stdout, &p);
	return 0;
}

static int cmd_devices(void)
{
	struct sp_params p;
	struct dev_config cfg;
	struct dev_ctx *ctx = NULL;
	if (load_params(&p) < 0)
		return 1;
	if (dev_config_from_params(&p, &cfg) < 0 || dev_open(&cfg, &ctx) < 0) {
		fprintf(stderr, "spill: %s\n", sp_last_error());
		return 1;
	}
	int n = dev_count(ctx);
	printf("backend %s, %d device(s)\n", dev_backend_name(dev_backend(ctx)), n);
	for (int d = 0; d < n; d++) {
		struct dev_info info;
		char cap[32];
		if (dev_info(ctx, d, &info) < 0)
			continue;
		printf("  dev %d: %-24s %12s  %.1f TFLOP/s  mem %.0f GB/s  H2D %.1f GB/s  D2H %.1f "
		       "GB/s\n",
		       d, info.name, sp_format_size(info.capacity, cap, sizeof(cap)),
		       info.flops / 1e12, info.mem_bw / 1e9, dev_link_bw(ctx, DEV_HOST, d) / 1e9,
		       dev_link_bw(ctx, d, DEV_HOST) / 1e9);
	}
	printf("  host link (shared): %.1f GB/s; disk: %.1f GB/s\n", dev_host_link_bw(ctx) / 1e9,
	       dev_link_bw(ctx, DEV_DISK, DEV_HOST) / 1e9);
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++)
			if (a != b && dev_p2p_possible(ctx, a, b))
				printf("  p2p %d->%d: %.1f GB/s\n", a, b,
				       dev_link_bw(ctx, a, b) / 1e9);
	dev_close(ctx);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: spill <command> [args]\n"
	        "  params [--markdown]  print the SPILL_* variables (values, or the README table)\n"
	        "  devices              list the devices of the configured backend\n"
	        "  version              print the version\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "params") == 0)
		return cmd_params(argc - 1, argv + 1);
	if (strcmp(cmd, "devices") == 0)
		return cmd_devices();
	if (strcmp(cmd, "version") == 0) {
		printf("spill %s\n", SPILL_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "spill: unknown command '%s' (try `spill help`)\n", cmd);
	return 2;
}
