"""Horovod's exception types (horovod.common.exceptions is this module)."""


class HorovodInternalError(RuntimeError):
    """A collective failed on this rank: a peer died or cannot be reached, the ranks submitted
    different things under one name, or libhvd shut down under the op. libhvd's message says
    which; the collectives after it fail too until the job restarts (elastic jobs recover)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic: hvdrun announced a new set of hosts (raised by elastic state commits)."""

    def __init__(self, skip_sync=False):
        super().__init__('hosts updated')
        self.skip_sync = skip_sync


def get_version_mismatch_message(name, version, installed_version):
    return (f'Framework {name} installed with version {installed_version} but found version '
            f'{version}. This can result in unexpected behavior including runtime errors. '
            f'Rebuild hvdrun\'s Python binding against the installed framework.')
