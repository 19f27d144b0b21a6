// bench/driver_calls.py's tracer, loaded with LD_PRELOAD into every process of a run: each
// ioctl (the system call through which CUDA and ROCm drive the GPU) becomes one text line on the
// FIFO named by HIPEVOLVE_IOCTL_FIFO: "I pid start_ns duration_ns kind request sub", kind F for
// NVIDIA's resource manager (request = its escape number; sub = the control command or the
// allocated class), U for anything else (request = the whole ioctl number). "E pid ppid t
// cmdline" starts each executed process, "F pid ppid t" each forked one.
//
// The FIFO's descriptor sits above the soft RLIMIT_NOFILE (lowered by 16 if need be), out of
// reach of a sandbox's closerange(4, SC_OPEN_MAX), and every write first checks that the
// descriptor is still the FIFO: a trace never writes into a descriptor it does not own.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int (*real_ioctl)(int, unsigned long, void *);
static int logfd = -1;
static int mypid;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static dev_t log_dev;
static ino_t log_ino;

static void emit(const char *line, int n) {
  if (logfd < 0) return;
  struct stat st;
  if (fstat(logfd, &st) != 0 || st.st_dev != log_dev || st.st_ino != log_ino) {
    logfd = -1;  // closed or reused: never write into someone else's file
    return;
  }
  (void)!write(logfd, line, n);
}

static void on_fork_child(void) {
  mypid = getpid();
  char b[96];
  int n = snprintf(b, sizeof b, "F %d %d %llu\n", mypid, getppid(), (unsigned long long)now_ns());
  emit(b, n);
}

__attribute__((constructor)) static void init(void) {
  real_ioctl = (int (*)(int, unsigned long, void *))dlsym(RTLD_NEXT, "ioctl");
  mypid = getpid();
  const char *path = getenv("HIPEVOLVE_IOCTL_FIFO");
  if (!path) return;
  // Not blocking on open: with no reader left (the tracing tool gone) nothing is logged.
  int fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // but no line lost to a full pipe
  // Park the fd above the soft limit (lowered by 16 if need be), where closerange(4,
  // SC_OPEN_MAX) does not reach; give up logging rather than sit on a low fd.
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t soft = rl.rlim_cur;
  rlim_t top = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
  if (top < 64) { close(fd); return; }
  rl.rlim_cur = top;
  setrlimit(RLIMIT_NOFILE, &rl);
  int h = fcntl(fd, F_DUPFD_CLOEXEC, (int)(top - 4));
  rl.rlim_cur = soft < top - 16 ? soft : top - 16;
  setrlimit(RLIMIT_NOFILE, &rl);
  close(fd);
  if (h < 0) return;
  fd = h;
  struct stat st;
  fstat(fd, &st);
  log_dev = st.st_dev;
  log_ino = st.st_ino;
  // Not across exec: an executed process loads this library again and opens its own.
  logfd = fd;
  pthread_atfork(NULL, NULL, on_fork_child);
  char cmd[200] = {0};
  int c = open("/proc/self/cmdline", O_RDONLY);
  if (c >= 0) {
    int n = read(c, cmd, sizeof cmd - 1);
    close(c);
    for (int i = 0; i < n; i++)
      if (cmd[i] == 0 || cmd[i] == ' ' || cmd[i] == '\n') cmd[i] = '|';
  }
  char b[320];
  int n = snprintf(b, sizeof b, "E %d %d %llu %s\n", mypid, getppid(), (unsigned long long)now_ns(), cmd);
  emit(b, n);
}

int ioctl(int fd, unsigned long req, ...) {
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (!real_ioctl) real_ioctl = (int (*)(int, unsigned long, void *))dlsym(RTLD_NEXT, "ioctl");
  if (logfd < 0 || fd == logfd) return real_ioctl(fd, req, arg);
  uint64_t t0 = now_ns();
  int r = real_ioctl(fd, req, arg);
  uint64_t t1 = now_ns();
  unsigned type = (req >> 8) & 0xff, nr = req & 0xff;
  unsigned sub = 0;
  if (type == 'F' && arg) {
    if (nr == 0x2A) sub = ((uint32_t *)arg)[2];       // NV_ESC_RM_CONTROL: cmd
    else if (nr == 0x2B) sub = ((uint32_t *)arg)[3];  // NV_ESC_RM_ALLOC: hClass
  }
  char b[96];
  int n = snprintf(b, sizeof b, "I %d %llu %llu %c %x %x\n", mypid, (unsigned long long)t0,
                   (unsigned long long)(t1 - t0), type == 'F' ? 'F' : 'U',
                   type == 'F' ? nr : (unsigned)req, sub);
  emit(b, n);
  return r;
}
