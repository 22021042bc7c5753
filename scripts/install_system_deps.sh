#!/usr/bin/env bash
# System packages the tests use: Debian's postgresql (a real server for the results store),
# chromium (renders the HTML report), prometheus (scrapes the gateway in the dashboard test) and
# redis-server (the shared store of per-key limits and usage in the limit and cluster tests), and
# libjemalloc2 (the embedded stack's engine allocator, serving/engine/allocator.py; without it the stack
# falls back to glibc with a fixed mmap threshold).
# Installs only what is missing; needs root and apt-get.
set -euo pipefail
missing=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
command -v runuser >/dev/null || missing+=(util-linux)
[ -x /usr/bin/prometheus ] || missing+=(prometheus)
command -v redis-server >/dev/null || missing+=(redis-server)
compgen -G "/usr/lib/*/libjemalloc.so.2" >/dev/null || missing+=(libjemalloc2)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install these system packages first: ${missing[*]}" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The tests start their own prometheus and redis-server (temp config, loopback port): the packages'
# system services, which a host running systemd starts on install, would only linger on :9090 / :6379.
for service in prometheus redis-server; do
  if [[ " ${missing[*]} " == *" $service "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now "$service" >/dev/null 2>&1 || true
  fi
done
