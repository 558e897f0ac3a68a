// Inserts for the tables of the layers beyond cuda (comm, torch, host, gpu, gputime).
#pragma once
#include <sqlite3.h>

#include <vector>

#include "gpu/gpu_samples.h"
#include "store/rows.h"

namespace eacgm {

class Statements;  // store/sqlite_util.h

// Inside the caller's transaction. Returns false on an SQLite error (see sqlite3_errmsg).
bool write_host_samples(Statements& db, const std::vector<HostSampleRow>& rows);

const char* host_scope_name(HostScope scope);

bool write_comm_calls(Statements& db, const std::vector<CommCallRow>& rows);
bool write_torch_calls(Statements& db, const std::vector<TorchCallRow>& rows);

bool write_gpu_rows(Statements& db, const std::vector<GpuDevice>& devices,
                    const std::vector<GpuSample>& samples,
                    const std::vector<GpuProcessSample>& processes,
                    const std::vector<GpuXidEvent>& xids);
bool write_gpu_activity(Statements& db, const std::vector<GpuActivityRow>& rows);
bool write_gpu_collectives(Statements& db, const std::vector<GpuCollectiveRow>& rows);
bool write_gpu_slices(Statements& db, const std::vector<GpuSliceRow>& rows);

}  // namespace eacgm
