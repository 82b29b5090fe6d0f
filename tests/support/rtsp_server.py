#!/usr/bin/python3
"""A live RTSP camera for the tests: GStreamer's RTSP server on 127.0.0.1.

    /usr/bin/python3 tests/support/rtsp_server.py PORT [--user U --password P] [--path /cam] [--fps 15]
                                                  [--audio FILE.wav]

Serves an endless H.264 test pattern (a bouncing ball) at rtsp://127.0.0.1:PORT/cam,
with basic authentication when a user and password are given. With --audio, serves
the WAV file instead as Opus audio, from its start for each client, in real time,
ending the stream (RTCP BYE) when the file ends. Prints "ready" once
listening. SIGTERM/SIGINT stop it (clients see the stream end). Run it with
Debian's own python3: it needs `gi` with GstRtspServer (gir1.2-gst-rtsp-server-1.0).
"""

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--path", default="/cam")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--fps", type=int, default=15)
    ap.add_argument("--audio")
    a = ap.parse_args()

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(a.port))

    factory = GstRtspServer.RTSPMediaFactory()
    if a.audio:
        factory.set_launch(
            f"( filesrc location={a.audio} ! wavparse ! audioconvert ! audioresample "
            "! audio/x-raw,rate=48000,channels=1 ! opusenc ! rtpopuspay name=pay0 pt=97 )"
        )
        factory.set_shared(False)
    else:
        # x264enc threads=1: with frame threads a keyframe can go out in two pieces with one timestamp.
        factory.set_launch(
            "( videotestsrc is-live=true pattern=ball "
            f"! video/x-raw,width=320,height=240,framerate={a.fps}/1 "
            f"! x264enc tune=zerolatency speed-preset=ultrafast key-int-max={a.fps} threads=1 "
            "! rtph264pay name=pay0 pt=96 config-interval=1 )"
        )
        factory.set_shared(True)

    if a.user:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, a.user)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(a.user, a.password or ""), token)
        server.set_auth(auth)
        perms = GstRtspServer.RTSPPermissions()
        perms.add_role_from_structure(
            Gst.Structure.new_from_string(
                f"{a.user}, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"
            )
        )
        factory.set_permissions(perms)

    server.get_mount_points().add_factory(a.path, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{a.port}", file=sys.stderr)
        sys.exit(1)

    loop = GLib.MainLoop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    print("ready", flush=True)
    loop.run()


if __name__ == "__main__":
    main()
