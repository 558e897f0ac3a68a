// Inserts for the tables of the layers beyond cuda (comm, host, gpu).
#pragma once
#include <sqlite3.h>

#include <vector>

#include "gpu/gpu_samples.h"
#include "store/rows.h"

namespace eacgm {

// Inside the caller's transaction. Returns false on an SQLite error (see sqlite3_errmsg).
bool write_host_samples(sqlite3* db, const std::vector<HostSampleRow>& rows);

const char* host_scope_name(HostScope scope);

bool write_comm_calls(sqlite3* db, const std::vector<CommCallRow>& rows);
bool write_torch_calls(sqlite3* db, const std::vector<TorchCallRow>& rows);

bool write_gpu_rows(sqlite3* db, const std::vector<GpuDevice>& devices,
                    const std::vector<GpuSample>& samples,
                    const std::vector<GpuProcessSample>& processes,
                    const std::vector<GpuXidEvent>& xids);

}  // namespace eacgm
