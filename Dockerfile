# One image with `conveyor` (name server / broker / standalone) and `conveyor-operator`.
# Build: buildah bud -t localhost/conveyor:0.1.0 .   (or docker build)
# The final stage is FROM scratch: the two binaries plus the C runtime they link, no shell.
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# Statically linked glibc binaries (static-pie): the final stage needs no libraries.
# Release binaries without debug info (the workspace profile keeps line tables for profiling).
ENV RUSTFLAGS="-C target-feature=+crt-static" \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TARGET_DIR=/src/target-image
# The sources are touched first: a target directory cached across builds (tests/k8s/image.sh
# mounts one) may hold artifacts newer than these files' copied times, built from other
# sources, and cargo compares times. Only the workspace's own crates are rebuilt for it.
RUN find broker operator tests -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --target x86_64-unknown-linux-gnu \
        -p conveyor -p conveyor-operator \
    && mkdir -p /out/bin /out/data /out/tmp \
    && cp target-image/x86_64-unknown-linux-gnu/release/conveyor \
          target-image/x86_64-unknown-linux-gnu/release/conveyor-operator /out/bin/

FROM scratch
LABEL org.opencontainers.image.title="conveyor" \
      org.opencontainers.image.description="Conveyor message queue and its Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build --chown=10001:10001 /out/data /var/lib/conveyor
COPY --from=build --chown=10001:10001 /out/tmp /tmp
USER 10001:10001
WORKDIR /var/lib/conveyor
EXPOSE 9876 10911 8080
ENTRYPOINT ["/usr/local/bin/conveyor"]
CMD ["standalone", "--data-dir", "/var/lib/conveyor"]
