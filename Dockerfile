# hvdrun in a container (docs/container.md): hvdrun, libhvd and the example programs on Debian 12,
# with a key-only sshd for workers. No privileged mode, no password anywhere.
#
#   docker build -t hvdrun .
#   docker run -d --name worker1 --network hvd -e HVDRUN_KEYS_DIR=/keys -v "$PWD/keys:/keys:ro" hvdrun
#   docker run --rm --network hvd -e HVDRUN_KEYS_DIR=/keys -v "$PWD/keys:/keys:ro" hvdrun \
#       hvdrun -np 2 -H worker1:1,worker2:1 -p 12345 -i /keys/id_ed25519 train_fashion_mnist --epochs 1
#
# CI does not build this image (it has no Docker engine); tests/container/entrypoint_check.sh
# runs docker/entrypoint.sh directly instead.
FROM debian:bookworm

# The Debian packages of the build and of the run: compilers, CMake/Ninja, libssh, Open MPI, Gloo,
# openssh-server/-client and the Fashion-MNIST data (/usr/share/datasets/fashion-mnist), which
# train_fashion_mnist reads by default. The package's host keys would be the same in every
# container made from this image: they go, and the entrypoint makes one per container instead.
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh \
 && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && rm -f /etc/ssh/ssh_host_*

# Only the source folders the build needs: never `COPY . `, which would take build/ trees and any
# private keys lying in docker/keys/ into the image.
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY common /src/common
COPY worker /src/worker
COPY ssh /src/ssh
COPY launcher /src/launcher
COPY cli /src/cli
COPY allreduce /src/allreduce
COPY bench /src/bench
COPY examples /src/examples

# Build (RelWithDebInfo: the configuration CI tests; binaries are stripped on install; CPU only:
# this Debian base has no CUDA toolkit, so no NCCL plugin), then
# install: libhvd with its headers, CMake package and pkg-config file (cmake --install, under
# /usr/local), hvdrun and the examples (not install targets: copied). hvdrun must be at the same
# path in every container: the launcher starts `/usr/local/bin/hvdrun --agent` on each worker.
RUN cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF \
        -DHVD_WITH_NCCL=OFF \
 && cmake --build /src/build \
 && cmake --install /src/build --strip \
 && install -s -m 0755 /src/build/cli/hvdrun /usr/local/bin/hvdrun \
 && install -s -m 0755 /src/build/examples/rank_info /src/build/examples/train_fashion_mnist \
        /usr/local/bin/ \
 && ldconfig \
 && rm -rf /src/build \
 && hvdrun --version

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
