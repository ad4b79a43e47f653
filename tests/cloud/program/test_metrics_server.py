"""metrics-server seen from the firewalls' side in the public mode (issue 38): the program's
firewalls admit the kubelet port (10250) from the control planes' addresses alone, and the
node configs it declares put metrics-server where its scrapes come from such an address.

metrics-server reaches each kubelet at the node's InternalIP (k3s' packaged arguments,
`--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname`: k3s-io/k3s
pkg/server/server.go, `addrTypesPrioTemplate`), the public address in this mode (k3s'
`node-ip`). Its pod's packets to an address outside the cluster CIDR leave masqueraded to
the address of the node it runs on (flannel-io/flannel pkg/trafficmngr/iptables/iptables.go,
`masqRules`: `-s <cluster CIDR> ! -d 224.0.0.0/4 -j MASQUERADE`; k3s runs flannel with IP
masquerading on): the source the firewalls see is its node's public address, and every
firewall applies to every server.
"""

from __future__ import annotations

from pathlib import Path

from raya.model.fleet import Cluster
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import reveal
from tests.cloud.program.test_program import SERVER, provider_mocks, run
from tests.cloud.program.test_public import addresses, admitted, large
from tests.nodes.scheduling import K3S_CONFIG, fits, registered
from tests.nodes.test_metrics_server import pod_spec

KUBELET = ("tcp", "10250")


def test_metrics_server_scrapes_from_an_address_the_firewalls_admit(tmp_path: Path) -> None:
    cluster: Cluster = large(tmp_path, 2, 1, control_planes=3)
    result = run(provider_mocks(), cluster)
    files = {
        name: ignition_files(reveal(server.inputs)["userData"])
        for name, server in result.of_type(SERVER).items()
    }
    control_planes = {node.name for node in cluster.control_planes}
    nodes = {
        name: registered(name, found[K3S_CONFIG], server=name in control_planes)
        for name, found in files.items()
    }
    spec = pod_spec(files["control-plane"])
    ip = {name: f"{address}/32" for name, address in addresses(result).items()}
    kubelet = admitted(result)[KUBELET]
    # Wherever the scheduler may put metrics-server, its source address is admitted on 10250.
    hosts = {name for name, node in nodes.items() if fits(spec, node)}
    assert hosts == control_planes
    assert {ip[name] for name in hosts} <= kubelet
    # An agent's address is not: metrics-server there would scrape no other node's kubelet.
    agents = set(nodes) - control_planes
    assert len(agents) == 3
    assert not {ip[name] for name in agents} & kubelet
