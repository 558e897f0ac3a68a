// Inserts for the sampled layers' tables (host, gpu), kept apart from the event tables.
#pragma once
#include <sqlite3.h>

#include <vector>

#include "store/rows.h"

namespace eacgm {

// Inside the caller's transaction. Returns false on an SQLite error (see sqlite3_errmsg).
bool write_host_samples(sqlite3* db, const std::vector<HostSampleRow>& rows);

const char* host_scope_name(HostScope scope);

}  // namespace eacgm
