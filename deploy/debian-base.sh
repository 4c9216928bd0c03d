#!/bin/sh
# Base images for Wharf's Dockerfile made from Debian packages, for machines that reach Debian's
# mirror but no image registry (`make image` runs this when the images are missing):
#
#   wharf/python:3.11-bookworm        python3 (Debian's 3.11): the runtime stage
#   wharf/python-build:3.11-bookworm  the same plus gcc, libc6-dev, zlib1g-dev and python3-dev:
#                                     the build stage, so the C accelerators compile with no
#                                     network inside `docker build`
#
# Usage: deploy/debian-base.sh [SOURCES]   (SOURCES: a sources.list/.sources file or a mirror
# URL; default: this machine's own /etc/apt sources). Needs root (mmdebstrap --mode=root) and a
# docker client talking to an engine ($DOCKER_HOST). One mmdebstrap run makes both: the build
# tree is saved first, then the build packages are purged for the runtime tree
# (~150 s, mostly downloads, on a 2-core machine; 300 MB runtime, 460 MB build).
set -eu

SUITE=${SUITE:-bookworm}
RUNTIME_TAG=${RUNTIME_TAG:-wharf/python:3.11-bookworm}
BUILD_TAG=${BUILD_TAG:-wharf/python-build:3.11-bookworm}
if [ $# -ge 1 ]; then
    SOURCES=$1
elif [ -f /etc/apt/sources.list.d/debian.sources ]; then
    SOURCES=/etc/apt/sources.list.d/debian.sources
elif [ -s /etc/apt/sources.list ]; then
    SOURCES=/etc/apt/sources.list
else
    SOURCES=http://deb.debian.org/debian
fi
BUILD_ONLY="gcc libc6-dev zlib1g-dev python3-dev"

work=$(mktemp -d /tmp/wharf-base.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Debian's python3 has no pip and refuses `pip install` outside a virtual environment (PEP 668):
# python3-venv gives the Dockerfile `python3 -m venv` with ensurepip. passwd: useradd/groupadd
# for the image's unprivileged user. The hooks run in order on the finished tree: apt's lists
# and caches go (~40 MB), the tree is saved as the build image, then the build packages (and
# what only they pulled in) are purged and what is left is the runtime image.
# --one-file-system: mmdebstrap has /proc, /sys and /dev mounted in the tree during hooks.
mmdebstrap --mode=root --variant=minbase \
    --include="python3,python3-venv,ca-certificates,passwd,$(echo "$BUILD_ONLY" | tr ' ' ',')" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb' \
    --customize-hook="tar -C \"\$1\" --one-file-system --numeric-owner -cf $work/build.tar ." \
    --customize-hook="chroot \"\$1\" apt-get purge -y -qq --autoremove $BUILD_ONLY >/dev/null" \
    "$SUITE" "$work/runtime.tar" "$SOURCES"

for pair in "$work/runtime.tar $RUNTIME_TAG" "$work/build.tar $BUILD_TAG"; do
    set -- $pair
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        "$1" "$2" >/dev/null
    echo "made $2 ($(docker image inspect -f '{{.Size}}' "$2" | awk '{printf "%d MB", $1 / 1e6}'))"
done
