"""A Python gRPC client of the observatory, from stubs generated out of proto/ (test/support/python-stubs.ts).

Usage: polyglot_client.py HOST:PORT RUN_ID. Prints one JSON document with what it saw; the test
(test/grpc.python.test.ts) compares it with the REST answers.
"""
import json
import sys
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from observatory.v1 import telemetry_pb2, telemetry_pb2_grpc, trust_pb2, trust_pb2_grpc
from obs_grpc.health.v1 import health_pb2, health_pb2_grpc
from obs_grpc.reflection.v1 import reflection_pb2, reflection_pb2_grpc

target, run_id = sys.argv[1], sys.argv[2]
TIMEOUT = 60
out = {}


def as_dict(msg):
    return json_format.MessageToDict(msg, preserving_proto_field_name=True, including_default_value_fields=True)


def code_of(call):
    try:
        call()
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details()}
    return {"code": "OK"}


with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
    telemetry = telemetry_pb2_grpc.TelemetryServiceStub(channel)
    trust = trust_pb2_grpc.TrustServiceStub(channel)
    one = f"https://py-{run_id}-unary.example.com/mcp"
    many = f"https://py-{run_id}-stream.example.com/mcp"

    # Unary: one report, then the trust record it feeds.
    rep = telemetry.Report(telemetry_pb2.ReportRequest(server_url=one, success=True, latency_ms=42, tool_name="search_docs"), timeout=TIMEOUT)
    out["report"] = as_dict(rep)

    # Client stream: ten reports (eight successes) and one the service refuses.
    def reports():
        for i in range(10):
            yield telemetry_pb2.ReportStreamRequest(report=telemetry_pb2.ReportRequest(server_url=many, success=i < 8, latency_ms=10 + i))
        yield telemetry_pb2.ReportStreamRequest(report=telemetry_pb2.ReportRequest(server_url="not-a-url", success=True, latency_ms=1))

    out["report_stream"] = as_dict(telemetry.ReportStream(reports(), timeout=TIMEOUT))
    # A server's own record shows its reports at once; the category baseline its score uses and
    # the leaderboard follow within AGGREGATE_SETTLE_MS (500 ms): wait for them, so that the
    # figures read below are the ones REST answers afterwards.
    time.sleep(0.6)
    out["trust_unary"] = as_dict(trust.GetTrust(trust_pb2.GetTrustRequest(url=one), timeout=TIMEOUT))
    out["trust_stream"] = as_dict(trust.GetTrust(trust_pb2.GetTrustRequest(url=many), timeout=TIMEOUT))
    out["leaderboard"] = as_dict(trust.GetLeaderboard(trust_pb2.GetLeaderboardRequest(), timeout=TIMEOUT))

    # Errors, as a gRPC client sees them.
    out["errors"] = {
        "not_tracked": code_of(lambda: trust.GetTrust(trust_pb2.GetTrustRequest(url=f"https://py-{run_id}-nobody.example.com/mcp"), timeout=TIMEOUT)),
        "invalid": code_of(lambda: trust.GetTrust(trust_pb2.GetTrustRequest(url=""), timeout=TIMEOUT)),
        "oversize": code_of(lambda: trust.GetTrust(trust_pb2.GetTrustRequest(url="x" * (100 * 1024)), timeout=TIMEOUT)),
        "unknown_method": code_of(
            lambda: channel.unary_unary("/observatory.v1.TrustService/NoSuchMethod", request_serializer=lambda m: m.SerializeToString(), response_deserializer=trust_pb2.GetTrustResponse.FromString)(
                trust_pb2.GetTrustRequest(url=one), timeout=TIMEOUT
            )
        ),
    }

    # Health, as Kubernetes' grpc probe and grpc-health-probe ask.
    health = health_pb2_grpc.HealthStub(channel)
    out["health"] = {
        "": health_pb2.HealthCheckResponse.ServingStatus.Name(health.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT).status),
        "observatory.v1.TrustService": health_pb2.HealthCheckResponse.ServingStatus.Name(health.Check(health_pb2.HealthCheckRequest(service="observatory.v1.TrustService"), timeout=TIMEOUT).status),
        "unknown": code_of(lambda: health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=TIMEOUT)),
    }
    watch = health.Watch(health_pb2.HealthCheckRequest(service="observatory.v1.TelemetryService"), timeout=TIMEOUT)
    out["health"]["watch_first"] = health_pb2.HealthCheckResponse.ServingStatus.Name(next(watch).status)
    watch.cancel()

    # Reflection: list the services, fetch the file of one with its imports, and call a method
    # through message classes built from those descriptors alone.
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    questions = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="observatory.v1.TrustService"),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="observatory.v1.NoSuchThing"),
    ]
    answers = list(reflection.ServerReflectionInfo(iter(questions), timeout=TIMEOUT))
    out["reflection_services"] = [s.name for s in answers[0].list_services_response.service]
    protos = {}
    for raw in answers[1].file_descriptor_response.file_descriptor_proto:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
        protos[fdp.name] = fdp
    pool = descriptor_pool.DescriptorPool()

    def add(name):
        if name in added:
            return
        for dep in protos[name].dependency:
            add(dep)
        pool.Add(protos[name])
        added.add(name)

    added = set()
    add("observatory/v1/trust.proto")
    service = pool.FindServiceByName("observatory.v1.TrustService")
    out["reflection_methods"] = sorted(m.name for m in service.methods)
    out["reflection_unknown"] = answers[2].error_response.error_code
    method = service.methods_by_name["GetTrust"]
    factory = message_factory.MessageFactory(pool)
    request_class = factory.GetPrototype(method.input_type)
    response_class = factory.GetPrototype(method.output_type)
    dynamic = channel.unary_unary(f"/{service.full_name}/{method.name}", request_serializer=lambda m: m.SerializeToString(), response_deserializer=response_class.FromString)
    out["reflection_call"] = as_dict(dynamic(request_class(url=one), timeout=TIMEOUT))

print(json.dumps(out))
