// A JVM application for Spark standalone's cluster deploy mode, compiled by the test tier: it records
// that it ran, optionally fails once, sleeps, then writes one object into its staging branch through
// the lakeFS API. Its locations come from the spark.lakefence.* confs (system properties in the
// driver), the credentials from the driver's environment (the cluster's, as on YARN or Kubernetes).
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Base64;

public class LakefenceMarkerJob {
    private static void log(Path runs, String line) throws Exception {
        String stamped = line + " " + (System.currentTimeMillis() / 1000.0) + "\n";
        Files.writeString(runs, stamped, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        Path runs = Paths.get(args[1]);
        String failOnce = args.length > 2 ? args[2] : "-";
        String endpoint = System.getProperty("spark.lakefence.endpoint").replaceAll("/+$", "").replaceAll("/api/v1$", "");
        String repository = System.getProperty("spark.lakefence.repository");
        String branch = System.getProperty("spark.lakefence.stagingBranch");
        log(runs, "start " + branch);
        if (!failOnce.equals("-") && !Files.exists(Paths.get(failOnce))) {
            Files.writeString(Paths.get(failOnce), "failed once");
            log(runs, "fail " + branch);
            System.exit(3);
        }
        Thread.sleep((long) (seconds * 1000));
        String user = System.getenv("LAKEFS_ACCESS_KEY_ID") + ":" + System.getenv("LAKEFS_SECRET_ACCESS_KEY");
        String url = endpoint + "/api/v1/repositories/" + repository + "/branches/"
            + URLEncoder.encode(branch, StandardCharsets.UTF_8) + "/objects?path="
            + URLEncoder.encode("out/result.txt", StandardCharsets.UTF_8);
        HttpRequest request = HttpRequest.newBuilder(URI.create(url))
            .header("Authorization", "Basic " + Base64.getEncoder().encodeToString(user.getBytes(StandardCharsets.UTF_8)))
            .header("Content-Type", "application/octet-stream")
            .POST(HttpRequest.BodyPublishers.ofString("written once by the job of " + branch + "\n"))
            .build();
        HttpResponse<String> response = HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() >= 300) {
            log(runs, "upload failed " + response.statusCode());
            System.exit(4);
        }
        log(runs, "done " + branch);
    }
}
