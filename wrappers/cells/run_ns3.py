"""The ns-3 side of a cell simulation, run as its own process (the only module importing ns-3).

``python -m fleetgym.wrappers.cells.run_ns3 IN.json OUT.npz`` reads a list of cells'
plain data (:meth:`~fleetgym.wrappers.cells.config.WifiCell.to_dict`, ``step_ms`` set),
simulates each in ns-3 and writes ``OUT.npz`` (numpy arrays only, no pickle) per cell
``i``: ``up_i`` and ``down_i``, the one-way delay in ms of every control packet
(stations x packets, ``inf`` = never delivered), and ``meta_i``, a JSON string (ns-3's
version, the simulation's wall seconds, the packets sent and delivered).

The Wi-Fi network: one access point, ``stations`` stations of one 802.11 standard on a
Yans channel (log-distance path loss), the ideal rate manager, IPv4 over the cell with the
neighbour caches filled up front (no ARP exchange in the measured stretch); the agent is
the access point. The LTE network: one base station, ``stations`` UEs on its default
bearers (ns-3's LTE models: proportional-fair scheduling, the default path loss), the EPC,
and the agent on a server behind the packet gateway (10 Gb/s, ``backhaul_ms``). Every
station sends one observation packet up per control period at its own phase (drawn from
the seed) and the agent one action packet down to it at the same phase; a station's
background stream is constant-rate UDP of 1,400-byte packets to the agent's node. Control
traffic starts 1 s after the background, so association and rate choice are settled; a
packet still undelivered 5 s after the last send is lost. Run in its own process so that
ns-3's global state and its seconds-long import never touch the caller; inside it, each
cell runs in a child forked after the import (:func:`_in_child`), so that a cell's packets
do not depend on the cells simulated before it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

#: Seconds of simulated time before the control traffic starts (association, rate choice).
WARMUP_S = 1.0
#: Seconds the simulation runs past the last control packet (late packets still arrive).
DRAIN_S = 5.0
#: Background packets' UDP payload in bytes.
BACKGROUND_BYTES = 1400

_RECORDER = r"""
#include <vector>
namespace fleetgym_cells {
using namespace ns3;
// Receives one control flow: the sequence number and one-way delay of every packet.
struct Recorder {
  std::vector<uint32_t> seq;
  std::vector<int64_t> delay_ns;
  void Rx(Ptr<const Packet> packet) {
    SeqTsHeader header;
    Ptr<Packet> copy = packet->Copy();
    copy->RemoveHeader(header);
    seq.push_back(header.GetSeq());
    delay_ns.push_back((Simulator::Now() - header.GetTs()).GetNanoSeconds());
  }
  void Connect(Ptr<Application> app) {
    app->TraceConnectWithoutContext("Rx", MakeCallback(&Recorder::Rx, this));
  }
};
}
"""

_STANDARDS = {
    "802.11a": "WIFI_STANDARD_80211a",
    "802.11g": "WIFI_STANDARD_80211g",
    "802.11n": "WIFI_STANDARD_80211n",
    "802.11ac": "WIFI_STANDARD_80211ac",
    "802.11ax": "WIFI_STANDARD_80211ax",
}


def _load_ns3() -> tuple[Any, Any]:
    import cppyy  # type: ignore[import-not-found]
    from ns import ns  # type: ignore[import-not-found]

    if not hasattr(cppyy.gbl, "fleetgym_cells"):
        cppyy.cppdef(_RECORDER)
    return ns, cppyy.gbl.fleetgym_cells


def _positions(ns: Any, cell: dict[str, Any], rng: np.random.Generator) -> Any:
    alloc = ns.CreateObject[ns.ListPositionAllocator]()
    alloc.Add(ns.Vector(0.0, 0.0, 0.0))
    n, d = cell["stations"], cell["distance_m"]
    turn = rng.uniform(0.0, 2.0 * math.pi)
    for i in range(n):
        a = turn + 2.0 * math.pi * i / n
        alloc.Add(ns.Vector(d * math.cos(a), d * math.sin(a), 0.0))
    return alloc


def _mobility(ns: Any, cell: dict[str, Any], rng: np.random.Generator, hub: Any, sta: Any) -> None:
    mobility = ns.MobilityHelper()
    mobility.SetPositionAllocator(_positions(ns, cell, rng))
    mobility.SetMobilityModel("ns3::ConstantPositionMobilityModel")
    mobility.Install(hub)
    if cell["mobility"] == "walk":
        d = float(cell["distance_m"])
        mobility.SetMobilityModel(
            "ns3::RandomWalk2dMobilityModel",
            "Bounds",
            ns.RectangleValue(ns.Rectangle(-d, d, -d, d)),
            "Speed",
            ns.StringValue("ns3::ConstantRandomVariable[Constant=1.0]"),
        )
    mobility.Install(sta)


def _wifi(ns: Any, cell: dict[str, Any], rng: np.random.Generator) -> tuple[Any, ...]:
    """An access point and its stations: (server node, its address, stations, addresses,
    the helpers, which must outlive the run)."""
    ap, sta = ns.NodeContainer(), ns.NodeContainer()
    ap.Create(1)
    sta.Create(int(cell["stations"]))
    phy = ns.YansWifiPhyHelper()
    phy.SetChannel(ns.YansWifiChannelHelper.Default().Create())
    wifi = ns.WifiHelper()
    wifi.SetStandard(getattr(ns, _STANDARDS[cell["standard"]]))
    wifi.SetRemoteStationManager("ns3::IdealWifiManager")
    mac = ns.WifiMacHelper()
    ssid = ns.Ssid("fleetgym")
    mac.SetType("ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid))
    sta_dev = wifi.Install(phy, mac, sta)
    mac.SetType("ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid))
    ap_dev = wifi.Install(phy, mac, ap)
    _mobility(ns, cell, rng, ap, sta)
    stack = ns.InternetStackHelper()
    stack.Install(ap)
    stack.Install(sta)
    address = ns.Ipv4AddressHelper()
    address.SetBase(ns.Ipv4Address("10.1.0.0"), ns.Ipv4Mask("255.255.0.0"))
    ap_ip = address.Assign(ap_dev)
    sta_ip = address.Assign(sta_dev)
    ns.NeighborCacheHelper().PopulateNeighborCache()
    return ap.Get(0), ap_ip.GetAddress(0), sta, sta_ip, [ap, phy, wifi, mac, stack, address]


def _lte(ns: Any, cell: dict[str, Any], rng: np.random.Generator) -> tuple[Any, ...]:
    """A base station, its UEs, the EPC and a server behind the gateway (same tuple)."""
    lte = ns.CreateObject[ns.LteHelper]()
    epc = ns.CreateObject[ns.PointToPointEpcHelper]()
    lte.SetEpcHelper(epc)
    rb = ns.UintegerValue(int(cell["bandwidth_rb"]))
    lte.SetEnbDeviceAttribute("DlBandwidth", rb)
    lte.SetEnbDeviceAttribute("UlBandwidth", rb)
    server = ns.NodeContainer()
    server.Create(1)
    stack = ns.InternetStackHelper()
    stack.Install(server)
    p2p = ns.PointToPointHelper()
    p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate("10Gb/s")))
    p2p.SetChannelAttribute(
        "Delay", ns.TimeValue(ns.NanoSeconds(int(float(cell["backhaul_ms"]) * 1e6)))
    )
    link = p2p.Install(epc.GetPgwNode(), server.Get(0))
    address = ns.Ipv4AddressHelper()
    address.SetBase(ns.Ipv4Address("1.0.0.0"), ns.Ipv4Mask("255.0.0.0"))
    server_ip = address.Assign(link).GetAddress(1)
    routing = ns.Ipv4StaticRoutingHelper()
    routes = routing.GetStaticRouting(server.Get(0).GetObject[ns.Ipv4]())
    routes.AddNetworkRouteTo(ns.Ipv4Address("7.0.0.0"), ns.Ipv4Mask("255.0.0.0"), 1)
    enb, ue = ns.NodeContainer(), ns.NodeContainer()
    enb.Create(1)
    ue.Create(int(cell["stations"]))
    _mobility(ns, cell, rng, enb, ue)
    enb_dev = lte.InstallEnbDevice(enb)
    ue_dev = lte.InstallUeDevice(ue)
    stack.Install(ue)
    ue_ip = epc.AssignUeIpv4Address(ue_dev)
    for i in range(int(cell["stations"])):
        routes = routing.GetStaticRouting(ue.Get(i).GetObject[ns.Ipv4]())
        routes.SetDefaultRoute(epc.GetUeDefaultGatewayAddress(), 1)
    lte.Attach(ue_dev, enb_dev.Get(0))
    keep = [lte, epc, server, stack, p2p, link, address, routing, enb, enb_dev, ue_dev]
    return server.Get(0), server_ip, ue, ue_ip, keep


def simulate_one(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Simulate one cell; (uplink delays, downlink delays, meta) as described above."""
    ns, cells = _load_ns3()
    started = time.perf_counter()
    n, step_ms = int(cell["stations"]), float(cell["step_ms"])
    packets = int(cell["seconds"] * 1000.0 // step_ms)
    rng = np.random.default_rng(cell["seed"])
    ns.RngSeedManager.SetSeed(1)
    ns.RngSeedManager.SetRun(int(cell["seed"]) + 1)
    build = _lte if cell["type"] == "lte" else _wifi
    hub, hub_ip, sta, sta_ip, keep = build(ns, cell, rng)

    phases = rng.uniform(0.0, step_ms, size=n)
    end_s = WARMUP_S + 0.5 + cell["seconds"]
    recorders = []
    for i in range(n):
        start = ns.Seconds(WARMUP_S + 0.5) + ns.NanoSeconds(int(phases[i] * 1e6))
        for src, dst, dst_ip, port, size in (
            (sta.Get(i), hub, hub_ip, 10_000 + i, cell["obs_bytes"]),
            (hub, sta.Get(i), sta_ip.GetAddress(i), 20_000 + i, cell["action_bytes"]),
        ):
            server = ns.UdpServerHelper(port).Install(dst)
            server.Start(ns.Seconds(0.0))
            client = ns.UdpClientHelper(ns.InetSocketAddress(dst_ip, port).ConvertTo())
            client.SetAttribute("MaxPackets", ns.UintegerValue(packets))
            client.SetAttribute("Interval", ns.TimeValue(ns.NanoSeconds(int(step_ms * 1e6))))
            client.SetAttribute("PacketSize", ns.UintegerValue(int(size)))
            apps = client.Install(src)
            apps.Start(start)
            recorder = cells.Recorder()
            recorder.Connect(server.Get(0))
            recorders.append(recorder)
        if cell["background_mbps"] > 0:
            onoff = ns.OnOffHelper(
                "ns3::UdpSocketFactory", ns.InetSocketAddress(hub_ip, 9).ConvertTo()
            )
            onoff.SetConstantRate(ns.DataRate(int(cell["background_mbps"] * 1e6)), BACKGROUND_BYTES)
            bg = onoff.Install(sta.Get(i))
            bg.Start(ns.Seconds(0.5) + ns.NanoSeconds(int(rng.uniform(0.0, 1e7))))
            bg.Stop(ns.Seconds(end_s))
    if cell["background_mbps"] > 0:
        sink = ns.PacketSinkHelper(
            "ns3::UdpSocketFactory", ns.InetSocketAddress(ns.Ipv4Address.GetAny(), 9).ConvertTo()
        )
        sink.Install(hub).Start(ns.Seconds(0.0))

    ns.Simulator.Stop(ns.Seconds(end_s + DRAIN_S))
    ns.Simulator.Run()
    delays = np.full((2 * n, packets), np.inf)
    for row, recorder in enumerate(recorders):
        seq = np.array(list(recorder.seq), dtype=np.int64)
        ms = np.array(list(recorder.delay_ns), dtype=np.float64) / 1e6
        keep = seq < packets
        delays[row, seq[keep]] = ms[keep]
    ns.Simulator.Destroy()
    del keep
    up, down = delays[0::2], delays[1::2]
    meta = {
        "ns3_version": _ns3_version(),
        "wall_s": time.perf_counter() - started,
        "packets": packets,
        "delivered_up": int(np.isfinite(up).sum()),
        "delivered_down": int(np.isfinite(down).sum()),
    }
    return up, down, meta


def _ns3_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ns3")
    except PackageNotFoundError:
        return "unknown"


def _in_child(cell: dict[str, Any], out: str) -> int:
    """Simulate ``cell`` in a forked child (ns-3 already imported) that writes ``out``.

    ns-3 numbers its random streams with a process-wide counter that a finished simulation
    does not reset: a second cell simulated in the same process would draw other streams
    than the same cell simulated first. Each cell runs in a child forked right after the
    import, so every cell starts from the same counter, whatever ran before it.
    """
    pid = os.fork()
    if pid == 0:  # the child: simulate, write, leave without running the parent's cleanup
        code = 1
        try:
            up, down, meta = simulate_one(cell)
            with open(out, "wb") as handle:
                np.savez(handle, up=up, down=down, meta=np.array(json.dumps(meta)))
            code = 0
        except BaseException as exc:  # reported by the parent through the exit status
            print(f"ns-3 cell failed: {exc!r}", file=sys.stderr, flush=True)
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    """``IN.json OUT.npz``: simulate every cell of IN.json, write OUT.npz; 0 on success."""
    if len(argv) != 2:
        print("usage: python -m fleetgym.wrappers.cells.run_ns3 IN.json OUT.npz", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        cells = json.load(handle)
    _load_ns3()  # once, before the children fork
    arrays: dict[str, Any] = {}
    for i, cell in enumerate(cells):
        part = f"{argv[1]}.{i}.npz"
        code = _in_child(cell, part)
        if code != 0:
            print(f"ns-3 exited with {code} on cell {i}: {json.dumps(cell)}", file=sys.stderr)
            return 1
        with np.load(part, allow_pickle=False) as z:
            arrays[f"up_{i}"], arrays[f"down_{i}"] = np.array(z["up"]), np.array(z["down"])
            arrays[f"meta_{i}"] = np.array(z["meta"])
        os.unlink(part)
    with open(argv[1], "wb") as handle:
        np.savez(handle, **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
