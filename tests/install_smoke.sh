#!/bin/sh
# tests/install_smoke.sh BUILD_DIR: `cmake --install` into a temporary
# prefix, then build a tiny host against the installed kiln.pc and
# kiln/kiln_ext.h that dlopens the installed plugin and lists its backends.
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name kiln.pc | head -n1)
[ -n "$pc" ] || { echo "install_smoke: kiln.pc not installed"; echo "install_smoke: 0 passed, 1 failed"; exit 1; }
cat > "$tmp/host.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <kiln/kiln_ext.h>
int main(int argc, char **argv) {
  (void)argc;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
  onnxGetBackendIDsFunction ids = (onnxGetBackendIDsFunction)dlsym(h, "onnxGetBackendIDs");
  size_t n = 0;
  if (!ids || ids(NULL, &n) != ONNXIFI_STATUS_FALLBACK || n == 0) { printf("no backends\n"); return 1; }
  printf("installed plugin offers %zu backend(s)\n", n);
  dlclose(h);
  return 0;
}
C
cflags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags kiln)
libdir=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=libdir kiln)
cc -std=c11 -Wall -Wextra -Werror $cflags "$tmp/host.c" -o "$tmp/host" -ldl
"$tmp/host" "$libdir/libonnxifi-kiln.so"
[ -x "$tmp/prefix/bin/kiln-run" ] || { echo "install_smoke: kiln-run not installed"; echo "install_smoke: 0 passed, 1 failed"; exit 1; }
echo "install_smoke: 1 passed, 0 failed"
