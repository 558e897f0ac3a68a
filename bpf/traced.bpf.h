/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which processes the BPF programs look at, shared by every program object: the call tracer
 * owns the `traced` map and the host layer reuses it (userspace hands over its fd before
 * load), so both follow the same process tree.
 */
#ifndef EACGM_TRACED_BPF_H
#define EACGM_TRACED_BPF_H

const volatile __u32 filter_mode = EACGM_FILTER_PIDS;

/* tgids being traced; children of traced processes join at fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} traced SEC(".maps");

static __always_inline bool is_traced(__u32 tgid)
{
	if (filter_mode == EACGM_FILTER_ALL)
		return tgid != 0; /* every process, not the idle tasks */
	return bpf_map_lookup_elem(&traced, &tgid) != NULL;
}

#endif
