// SPDX-License-Identifier: GPL-2.0
/*
 * A stand-in for MetaX's metax.ko, built here for Debian's kernels: the test driver payload's module.
 *
 * Why: driver-manager's payload path (choose the module whose vermagic is the running kernel's, stage it on
 * the host, insmod it with driver-config's parameters, read them back in /sys/module/metax/parameters) must
 * meet a real kernel, and MetaX's driver is not redistributable here. This module has the driver's sysfs name,
 * a version (/sys/module/metax/version) and the module parameters driver-config sets in the tests; it claims
 * no device and does nothing else.
 */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/moduleparam.h>

#ifndef METAX_TEST_VERSION
#define METAX_TEST_VERSION "0.0.0"
#endif

static int xcore_page_size = 10;
module_param(xcore_page_size, int, 0444);
MODULE_PARM_DESC(xcore_page_size, "xcore page size");

static int gpu_model;
module_param(gpu_model, int, 0444);
MODULE_PARM_DESC(gpu_model, "GPU model override");

static bool enable_trace;
module_param(enable_trace, bool, 0444);
MODULE_PARM_DESC(enable_trace, "log the parameters at load");

static int __init metax_test_init(void)
{
	pr_info("metax (test payload) %s loaded: xcore_page_size=%d gpu_model=%d\n", METAX_TEST_VERSION,
		xcore_page_size, gpu_model);
	return 0;
}

static void __exit metax_test_exit(void)
{
	pr_info("metax (test payload) unloaded\n");
}

module_init(metax_test_init);
module_exit(metax_test_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("MetaX GPU Operator test payload module (no device)");
MODULE_VERSION(METAX_TEST_VERSION);
