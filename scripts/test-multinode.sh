#!/usr/bin/env bash
# Runs a program as 2 nodes × 1 rank on this machine, for real across a network: two network
# namespaces ("nodes") joined by a veth pair, each with its own host name, and OpenMPI's
# mpirun in the first starting the second node's daemon through `ip netns exec` (its rsh
# launch agent) instead of ssh. MPI traffic is forced onto TCP over the veth link.
#
#   scripts/test-multinode.sh PROGRAM [ARGS...]
#
# Needs root and iproute2. Exits 77 (skip) when the namespaces cannot be made; otherwise with
# mpirun's status. Everything it creates is removed on exit.
set -euo pipefail

tag="em$$"
ns0="${tag}n0" ns1="${tag}n1"
addr0=10.231.$(($$ % 250)).1 addr1=10.231.$(($$ % 250)).2
subnet="${addr0%.*}.0/24"
agent=$(mktemp "${TMPDIR:-/tmp}/ember-netns-agent.XXXXXX")

cleanup() {
    ip netns pids "$ns1" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns pids "$ns0" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns0" 2>/dev/null || true
    ip netns del "$ns1" 2>/dev/null || true
    rm -f "$agent"
}
trap cleanup EXIT

if ! ip netns add "$ns0" 2>/dev/null || ! ip netns add "$ns1" 2>/dev/null; then
    echo "skipped: cannot create network namespaces here (needs root and iproute2)" >&2
    exit 77
fi
ip link add "${tag}a" type veth peer name "${tag}b"
ip link set "${tag}a" netns "$ns0"
ip link set "${tag}b" netns "$ns1"
ip -n "$ns0" addr add "$addr0/24" dev "${tag}a"
ip -n "$ns1" addr add "$addr1/24" dev "${tag}b"
for ns in "$ns0" "$ns1"; do
    ip -n "$ns" link set lo up
done
ip -n "$ns0" link set "${tag}a" up
ip -n "$ns1" link set "${tag}b" up

# mpirun calls `AGENT HOST COMMAND...` to start its daemon on HOST, as it would call ssh.
cat >"$agent" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in
    $addr1) ns=$ns1 name=node1 ;;
    *) ns=$ns0 name=node0 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
AGENT
chmod +x "$agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$ns0" unshare --uts sh -c "hostname node0; exec \"\$@\"" mpirun \
    mpirun --host "$addr0:1,$addr1:1" -np 2 \
    --mca plm_rsh_agent "$agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    -x EMBER_INVENTORY= -x RAYON_NUM_THREADS=1 \
    "$@"
