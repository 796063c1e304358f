#!/bin/bash
# The `secure` profile's broker (docker-compose.yml): Apache Kafka on SASL_SSL only, SCRAM users made
# at format time, a CA and broker certificate made with the JDK's keytool (nothing downloaded), and
# StandardAuthorizer. The same setup as `ttsflow stack up --secure` (streams/devstack/secure.py).
# Credentials land in /secure (a volume the ttsflow services mount read-only); passwords only in files.
set -euo pipefail
S=/secure
umask 077
mkdir -p "$S"
pw() { [ -s "$S/$1.password" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$S/$1.password"; cat "$S/$1.password"; }
USERS="admin ttsflow-user ttsflow-stage ttsflow-worker ttsflow-ops"
for u in $USERS; do pw "$u" >/dev/null; done
STORE=$(pw keystore)
if [ ! -s "$S/broker.p12" ]; then
  kt() { keytool "$@" -storetype PKCS12 -storepass "$STORE" -keypass "$STORE"; }
  SAN="SAN=dns:kafka-secure,dns:localhost,ip:127.0.0.1"
  kt -genkeypair -alias ca -keyalg RSA -dname "CN=ttsflow compose CA" -ext bc:c -validity 825 -keystore "$S/ca.p12"
  keytool -exportcert -rfc -alias ca -keystore "$S/ca.p12" -storepass "$STORE" -file "$S/ca.pem"
  kt -genkeypair -alias broker -keyalg RSA -dname CN=kafka-secure -ext "$SAN" -validity 825 -keystore "$S/broker.p12"
  keytool -certreq -alias broker -keystore "$S/broker.p12" -storepass "$STORE" -file "$S/broker.csr"
  keytool -gencert -alias ca -keystore "$S/ca.p12" -storepass "$STORE" -infile "$S/broker.csr" -outfile "$S/broker.crt" \
    -rfc -validity 825 -ext "$SAN" -ext ku:c=digitalSignature,keyEncipherment -ext eku=serverAuth,clientAuth
  keytool -importcert -noprompt -alias ca -file "$S/ca.pem" -keystore "$S/broker.p12" -storepass "$STORE"
  keytool -importcert -noprompt -alias broker -file "$S/broker.crt" -keystore "$S/broker.p12" -storepass "$STORE"
fi
chmod 0644 "$S/ca.pem"
chmod 0444 "$S"/ttsflow-*.password  # read by the ttsflow containers' non-root user
ADMIN=$(pw admin)
cat > "$S/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@kafka-secure:9093
listeners=SASL_SSL://:19094,EXTERNAL://:9094,CONTROLLER://:9093
advertised.listeners=SASL_SSL://kafka-secure:19094,EXTERNAL://localhost:9094
listener.security.protocol.map=SASL_SSL:SASL_SSL,EXTERNAL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=SASL_SSL
controller.listener.names=CONTROLLER
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$ADMIN";
listener.name.external.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$ADMIN";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$ADMIN" user_admin="$ADMIN";
ssl.keystore.type=PKCS12
ssl.keystore.location=$S/broker.p12
ssl.keystore.password=$STORE
ssl.key.password=$STORE
ssl.truststore.type=PEM
ssl.truststore.location=$S/ca.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
PROPS
cat > "$S/admin.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$ADMIN";
ssl.truststore.type=PEM
ssl.truststore.location=$S/ca.pem
PROPS
SCRAM=()
for u in $USERS; do SCRAM+=(--add-scram "SCRAM-SHA-512=[name=$u,password=$(pw "$u")]"); done
/opt/kafka/bin/kafka-storage.sh format -t ttsflow-secure-kraft-1 -c "$S/server.properties" --ignore-formatted "${SCRAM[@]}"
exec /opt/kafka/bin/kafka-server-start.sh "$S/server.properties"
