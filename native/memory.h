// What the agent gives back to the system once its work is done (docs/design.md, "Memory"): the C
// heap's free pages, glibc's threshold for blocks of their own, and the resident pages of the
// program's file mappings. Plain C++: nothing of N-API.
#pragma once

namespace memory {

// glibc's malloc_trim: every thread that allocated (libuv's pool, V8's helpers) keeps an arena of
// its own, and their freed pages stay in the process otherwise. Whether anything was released.
bool ReleaseFreePages();

// Blocks of at least `bytes` get their own mapping, returned to the system when freed; glibc raises
// this threshold to the largest block freed so far unless it is set. Whether glibc took it.
bool MapBlocksFrom(int bytes);

// Asks the kernel to reclaim the resident pages of the process's file-backed mappings that no other
// process maps (MADV_PAGEOUT, Linux 5.4 and later): a hint, each page is read back from its file
// when next used; anonymous memory is left alone. The bytes of the mappings advised (0: all
// refused). It reads and advises every mapping: call it off the JS thread.
double PageOutFileMappings();

}  // namespace memory
