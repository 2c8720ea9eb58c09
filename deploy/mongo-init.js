// Initiates the replica set of docker-compose.yml once: run by the
// "mongo-init" service against mongo1 on every `docker compose up`; an
// initiated set is left as it is. Exits 0 once the set has a primary, which
// the Loom nodes wait for (transactions and change streams need one).
const config = {
  _id: "rs0",
  members: [
    { _id: 0, host: "mongo1:27017", priority: 2 },
    { _id: 1, host: "mongo2:27017", priority: 1 },
    { _id: 2, host: "mongo3:27017", priority: 1 },
  ],
};

try {
  rs.status();
  print("replica set rs0 already initiated");
} catch (e) {
  if (e.codeName !== "NotYetInitialized") {
    throw e;
  }
  rs.initiate(config);
  print("replica set rs0 initiated");
}

for (let i = 0; i < 120; i++) {
  const primary = rs.status().members.find((m) => m.stateStr === "PRIMARY");
  if (primary) {
    print("primary: " + primary.name);
    quit(0);
  }
  sleep(1000);
}
print("replica set rs0 has no primary after 120 s");
quit(1);
