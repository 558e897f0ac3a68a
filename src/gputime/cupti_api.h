// CUPTI's activity API loaded with dlopen: the injection library (cupti_injection.cpp) and the
// GPU check's measuring probe (scripts/gpu_check/cupti_probe.cpp) both load it this way. Not
// linked: the library must load in a process whose CUPTI lives wherever its CUDA came from (a
// wheel's nvidia/ folder, the toolkit), or nowhere. Header-only and libc-only, as the
// injection library is.
#pragma once
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace eacgm::gputime {

struct CuptiApi {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityEnableRuntimeApi) enable_runtime_api = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) timestamp_callback = nullptr;
  decltype(&cuptiSetThreadIdType) thread_id_type = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  // detaching between duty-cycle slices (cuptiFinalize from a callback at an API's exit)
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableDomain) enable_domain = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;
  bool can_detach() const { return subscribe && enable_domain && finalize; }
  // the activity API's essentials, without which nothing can be recorded
  bool usable() const { return register_callbacks && enable && flush_all && next_record; }
};

// The folder of the first loaded library whose path contains `needle`, into `dir`.
inline bool dir_of_loaded(const char* needle, char (&dir)[4096]) {
  struct Search {
    const char* needle;
    char* dir;
    bool found;
  } search{needle, dir, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (!info->dlpi_name || !strstr(info->dlpi_name, s->needle)) return 0;
        const char* slash = strrchr(info->dlpi_name, '/');
        if (!slash || size_t(slash - info->dlpi_name) >= 4096) return 0;
        memcpy(s->dir, info->dlpi_name, size_t(slash - info->dlpi_name));
        s->dir[slash - info->dlpi_name] = 0;
        s->found = true;
        return 1;
      },
      &search);
  return search.found;
}

// libcupti: EACGM_CUPTI_LIB, else beside the process's CUDA runtime or driver, else the
// loader's search and the toolkit's usual places. nullptr when none loads.
inline void* open_cupti() {
  if (const char* lib = getenv("EACGM_CUPTI_LIB"))
    if (void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL)) return h;
  char dir[4096], path[4352];
  for (const char* near : {"libcudart.so", "libcuda.so"})
    if (dir_of_loaded(near, dir))
      for (const char* rel :
           {"/libcupti.so.13", "/libcupti.so.12", "/../../cuda_cupti/lib/libcupti.so.12",
            "/../../cuda_cupti/lib/libcupti.so.13"}) {
        snprintf(path, sizeof(path), "%s%s", dir, rel);
        if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
      }
  for (const char* c :
       {"libcupti.so.13", "libcupti.so.12", "libcupti.so",
        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"})
    if (void* h = dlopen(c, RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

// The functions of the libcupti `h`; a missing one stays nullptr.
inline CuptiApi cupti_api(void* h) {
  CuptiApi c;
#define EACGM_CUPTI_SYM(field, name) c.field = reinterpret_cast<decltype(c.field)>(dlsym(h, #name))
  EACGM_CUPTI_SYM(register_callbacks, cuptiActivityRegisterCallbacks);
  EACGM_CUPTI_SYM(enable, cuptiActivityEnable);
  EACGM_CUPTI_SYM(disable, cuptiActivityDisable);
  EACGM_CUPTI_SYM(enable_runtime_api, cuptiActivityEnableRuntimeApi);
  EACGM_CUPTI_SYM(flush_all, cuptiActivityFlushAll);
  EACGM_CUPTI_SYM(next_record, cuptiActivityGetNextRecord);
  EACGM_CUPTI_SYM(timestamp_callback, cuptiActivityRegisterTimestampCallback);
  EACGM_CUPTI_SYM(thread_id_type, cuptiSetThreadIdType);
  EACGM_CUPTI_SYM(dropped, cuptiActivityGetNumDroppedRecords);
  EACGM_CUPTI_SYM(result_string, cuptiGetResultString);
  EACGM_CUPTI_SYM(subscribe, cuptiSubscribe);
  EACGM_CUPTI_SYM(enable_domain, cuptiEnableDomain);
  EACGM_CUPTI_SYM(finalize, cuptiFinalize);
#undef EACGM_CUPTI_SYM
  return c;
}

}  // namespace eacgm::gputime
