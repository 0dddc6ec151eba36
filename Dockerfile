# hvdrun in a container (docs/container.md): hvdrun and libhvd installed from their Debian packages,
# and the example programs, on Debian 12, with a key-only sshd for workers. No privileged mode, no
# password anywhere.
#
#   docker build -t hvdrun .
#   docker run -d --name worker1 --network hvd -e HVDRUN_KEYS_DIR=/keys -v "$PWD/keys:/keys:ro" hvdrun
#   docker run --rm --network hvd -e HVDRUN_KEYS_DIR=/keys -v "$PWD/keys:/keys:ro" hvdrun \
#       hvdrun -np 2 -H worker1:1,worker2:1 -p 12345 -i /keys/id_ed25519 train_fashion_mnist --epochs 1
#
# With podman on Debian 12: `podman --runtime runc build --network host -t hvdrun .` (docs/container.md).
# CI builds this image with podman (tests/container/podman_job.sh) without compiling: it replaces
# the `build` stage by a folder whose debs/ holds what the stage makes, with
# `--build-context build=DIR` (podman 4.3+, docker buildx: a named context overrides the stage).
# Two stages: the first builds hvdrun's Debian packages (scripts/package.sh's steps, without the
# tests), the second installs them with apt-get, as a user's machine would, plus what the roles
# need: no compiler in the final image.
FROM debian:bookworm AS build

# The build's Debian packages: compilers, CMake/Ninja, libssh, Open MPI, Gloo, ...
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh

# Only the source folders the build needs: never `COPY . `, which would take build/ trees and any
# private keys lying in docker/keys/ into the image.
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY common /src/common
COPY agent /src/agent
COPY ssh /src/ssh
COPY launcher /src/launcher
COPY cli /src/cli
COPY allreduce /src/allreduce
COPY bench /src/bench
COPY examples /src/examples

# Release, installed under /usr, packaged by CPack (cmake/HvdPackaging.cmake). CPU only: this
# Debian base has no CUDA toolkit, so no NCCL plugin and no libhvd-nccl package.
RUN cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
        -DBUILD_TESTING=OFF -DHVD_WITH_NCCL=OFF \
 && cmake --build /src/build \
 && cd /src/build && cpack -G DEB \
 && mkdir /debs && cp /src/build/*.deb /debs/ \
 && install -s -m 0755 /src/build/examples/rank_info /src/build/examples/train_fashion_mnist /debs/

FROM debian:bookworm

# hvdrun and libhvd from their packages (apt-get resolves their Depends), libhvd-dev for programs
# built in the container, Open MPI's mpirun for --mpi, OpenSSH server and client, and the
# Fashion-MNIST data (/usr/share/datasets/fashion-mnist), which train_fashion_mnist reads by
# default. The package's host keys would be the same in every container made from this image:
# they go, and the entrypoint makes one per container instead.
COPY --from=build /debs /tmp/debs
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        /tmp/debs/hvdrun_*.deb /tmp/debs/libhvd0_*.deb /tmp/debs/libhvd-dev_*.deb \
        openmpi-bin openssh-server openssh-client dataset-fashion-mnist procps iproute2 \
 && install -m 0755 /tmp/debs/rank_info /tmp/debs/train_fashion_mnist /usr/local/bin/ \
 && rm -rf /var/lib/apt/lists/* /tmp/debs \
 && rm -f /etc/ssh/ssh_host_* \
 && hvdrun --version && hvdrun --check-build

# The entrypoint: `worker` (the default) runs sshd; anything else is run as the launcher.
COPY docker/entrypoint.sh /usr/local/bin/hvd-entrypoint
RUN chmod 0755 /usr/local/bin/hvd-entrypoint

# root's ssh client (ssh, mpirun's ssh, hvdrun's libssh) reads the settings the entrypoint's
# launcher mode writes: port, the key copied from HVDRUN_KEYS_DIR, known_hosts with accept-new.
# hvdrun records host keys in ~/.ssh/known_hosts otherwise: the folder has to exist.
RUN install -d -m 0700 /root/.ssh \
 && printf '%s\n' '# hvdrun image: client settings written by hvd-entrypoint (launcher mode)' \
        'Include /etc/hvd-sshd/ssh_config' >/root/.ssh/config \
 && chmod 0600 /root/.ssh/config

# Settings (docs/container.md): HVDRUN_SSH_PORT (default 12345), HVDRUN_SSH_LISTEN,
# HVDRUN_AUTHORIZED_KEYS, HVDRUN_KEYS_DIR, HVDRUN_STATE_DIR (default /etc/hvd-sshd). No ENV
# defaults here: the entrypoint has them, and an ENV value would win over a deprecated HVD_*
# name a user still passes.
EXPOSE 12345

# The ranks' working directory: hvdrun's default --wd is the launcher's current directory, which
# must exist on every worker too (same image, same WORKDIR).
WORKDIR /work

ENTRYPOINT ["/usr/local/bin/hvd-entrypoint"]
CMD ["worker"]
