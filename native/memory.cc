// memory.h: malloc_trim, mallopt and madvise(MADV_PAGEOUT) over /proc/self/maps.
#include "memory.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

namespace memory {

bool ReleaseFreePages() { return malloc_trim(0) == 1; }

bool MapBlocksFrom(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes) == 1; }

double PageOutFileMappings() {
  double advised = 0;
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return 0;
  char line[512];
  bool line_start = true;
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    // A long path leaves the rest of its line for the next read: only a line's start counts.
    const bool at_start = line_start;
    line_start = std::strchr(line, '\n') != nullptr;
    if (!at_start) continue;
    unsigned long start = 0, end = 0, inode = 0;
    if (std::sscanf(line, "%lx-%lx %*s %*s %*s %lu", &start, &end, &inode) != 3) continue;
    // Anonymous mappings have no inode; nor do [vdso] and its kind.
    if (inode == 0 || end <= start) continue;
    if (madvise(reinterpret_cast<void*>(start), end - start, MADV_PAGEOUT) == 0)
      advised += static_cast<double>(end - start);
  }
  std::fclose(maps);
  return advised;
}

}  // namespace memory
