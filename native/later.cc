// later.h
#include "later.h"

#include <unistd.h>

#include <system_error>
#include <thread>

namespace later {

void Run(const std::function<void()>& work) {
  try {
    std::thread(work).detach();
  } catch (const std::system_error&) {
    work();
  }
}

void Close(int fd) {
  Run([fd] { close(fd); });
}

}  // namespace later
